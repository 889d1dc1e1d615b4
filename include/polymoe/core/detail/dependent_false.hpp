#pragma once
namespace polymoe::detail {
/// False for every T, but only known once T is: lets a primary template fail at instantiation.
template <class...>
inline constexpr bool dependent_false = false;
}  // namespace polymoe::detail
