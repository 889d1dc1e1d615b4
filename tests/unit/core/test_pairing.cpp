// The pairing table, checked softly: valid triples, the paths they take, and archetypes named for
// what is wrong with them (the hard tier is tests/compile_fail).
#include <string>
#include <vector>

#include <boost/mp11/algorithm.hpp>
#include <gtest/gtest.h>

#include <polymoe/polymoe.hpp>

using namespace polymoe;
namespace mp = boost::mp11;

namespace archetypes {
struct NotAPolicy {};
/// Opts into the dispatcher role but has no line in the pairing table.
struct UnlistedDispatcher {
  using a2a_concept = a2a_tag;
  using format = format::standard;
  static constexpr std::string_view name = "unlisted";
};
/// Opts into the quant role but has no line in the pairing table.
struct UnlistedScheme {
  using quant_concept = quant_tag;
  static constexpr std::string_view name = "unlisted";
};
/// Opts into the kernel role but has no kernel_row.
struct UnlistedKernel {
  using kernel_concept = kernel_tag;
  static constexpr std::string_view name = "unlisted";
};
/// Has dispatcher-like members but never opts into the role.
struct DispatcherWithoutRole {
  using format = format::standard;
  static constexpr std::string_view name = "no-role";
};
}  // namespace archetypes

// Roles.
static_assert(dispatcher<a2a::local>);
static_assert(quant_scheme<quant::fp32> && quant_scheme<quant::bf16>);
static_assert(expert_kernel<kernel::reference> && expert_kernel<kernel::tbb_grouped>);
static_assert(expert_kernel_for<kernel::reference, quant::bf16, format::masked>);
static_assert(expert_kernel_for<kernel::tbb_grouped, quant::fp32, format::standard>);
static_assert(!dispatcher<archetypes::DispatcherWithoutRole>);
static_assert(!dispatcher<archetypes::UnlistedScheme>);
static_assert(!quant_scheme<archetypes::UnlistedDispatcher>);

// Valid triples and their paths.
static_assert(can_make_layer<a2a::local, quant::fp32, kernel::reference>);
static_assert(can_make_layer<a2a::local, quant::bf16, kernel::tbb_grouped>);
static_assert(std::is_same_v<pairing_path<a2a::local, quant::bf16, kernel::tbb_grouped>, path::native>);

// Invalid: each axis, each reason.
static_assert(!can_make_layer<archetypes::NotAPolicy, quant::fp32, kernel::reference>);
static_assert(!can_make_layer<archetypes::UnlistedDispatcher, quant::fp32, kernel::reference>);
static_assert(!can_make_layer<archetypes::DispatcherWithoutRole, quant::fp32, kernel::reference>);
static_assert(!can_make_layer<a2a::local, archetypes::NotAPolicy, kernel::reference>);
static_assert(!can_make_layer<a2a::local, archetypes::UnlistedScheme, kernel::reference>);
static_assert(!can_make_layer<a2a::local, quant::fp32, archetypes::NotAPolicy>);
static_assert(!can_make_layer<a2a::local, quant::fp32, archetypes::UnlistedKernel>);
// Axes swapped: a quant scheme in the dispatcher slot.
static_assert(!can_make_layer<quant::fp32, a2a::local, kernel::reference>);

// The diagnostics name the right reason (checked on the type, without instantiating it).
template <class A, class Q, class K>
using diag = typename pairing::resolve<A, Q, K>::diagnostic;
template <class T, template <class...> class D>
constexpr bool is_diag = false;
template <template <class...> class D, class... Ts>
constexpr bool is_diag<D<Ts...>, D> = true;
static_assert(is_diag<diag<archetypes::NotAPolicy, quant::fp32, kernel::reference>, diagnostic::a2a_axis_is_not_a_dispatcher>);
static_assert(is_diag<diag<archetypes::UnlistedDispatcher, quant::fp32, kernel::reference>, diagnostic::dispatcher_not_in_pairing_table>);
static_assert(is_diag<diag<a2a::local, archetypes::NotAPolicy, kernel::reference>, diagnostic::quant_axis_is_not_a_quant_scheme>);
static_assert(is_diag<diag<a2a::local, archetypes::UnlistedScheme, kernel::reference>, diagnostic::quant_scheme_not_in_pairing_table>);
static_assert(is_diag<diag<a2a::local, quant::fp32, archetypes::NotAPolicy>, diagnostic::kernel_axis_is_not_an_expert_kernel>);
static_assert(is_diag<diag<a2a::local, quant::fp32, archetypes::UnlistedKernel>, diagnostic::kernel_not_in_pairing_table>);
static_assert(quant_scheme<quant::mxfp4> && quant_scheme<quant::nvfp4_w4a4> && quant_scheme<quant::fp8_block_weight_only>);
static_assert(can_make_layer<a2a::local, quant::mxfp4, kernel::tiled>);
static_assert(can_make_layer<a2a::local, quant::nvfp4_w4a4, kernel::tiled_amx>);
static_assert(can_make_layer<a2a::local, quant::mxfp4_w4a16, kernel::tiled_amx>);
static_assert(!can_make_layer<a2a::local, quant::fp32, kernel::tiled_amx>);
static_assert(is_diag<diag<a2a::local, quant::fp32, kernel::tiled_amx>, diagnostic::kernel_does_not_implement_quant_scheme>);

TEST(Pairing, ValidTriplesAreTheFilteredProduct) {
  // The specification of the table, written out by hand: adding a policy updates this list on
  // purpose, so a change in what is valid is always a reviewed change.
  std::vector<std::string> got;
  mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    got.push_back(std::string(A::name) + "/" + std::string(Q::name) + "/" + std::string(K::name));
  });
  const std::vector<std::string> expected = {"local/fp32/reference", "local/fp32/tbb_grouped", "local/fp32/tiled",
                                             "local/bf16/reference", "local/bf16/tbb_grouped", "local/bf16/tiled",
                                             "local/bf16/tiled_amx",
                                             "local/fp8/reference", "local/fp8/tbb_grouped", "local/fp8/tiled",
                                             "local/fp8/tiled_amx",
                                             "local/fp8_block/reference", "local/fp8_block/tbb_grouped",
                                             "local/fp8_block/tiled", "local/fp8_block/tiled_amx",
                                             "local/fp8_block_weight_only/reference",
                                             "local/fp8_block_weight_only/tbb_grouped",
                                             "local/fp8_block_weight_only/tiled",
                                             "local/fp8_block_weight_only/tiled_amx", "local/int8_w8a8/reference",
                                             "local/int8_w8a8/tbb_grouped", "local/int8_w8a8/tiled",
                                             "local/int8_w8a8/tiled_amx",
                                             "local/mxfp4/reference", "local/mxfp4/tbb_grouped", "local/mxfp4/tiled",
                                             "local/mxfp4/tiled_amx",
                                             "local/mxfp4_w4a16/reference", "local/mxfp4_w4a16/tbb_grouped",
                                             "local/mxfp4_w4a16/tiled", "local/mxfp4_w4a16/tiled_amx",
                                             "local/nvfp4/reference", "local/nvfp4/tbb_grouped", "local/nvfp4/tiled",
                                             "local/nvfp4/tiled_amx",
                                             "local/nvfp4_w4a4/reference", "local/nvfp4_w4a4/tbb_grouped",
                                             "local/nvfp4_w4a4/tiled", "local/nvfp4_w4a4/tiled_amx",
                                             "local/nvfp4_w4a16/reference", "local/nvfp4_w4a16/tbb_grouped",
                                             "local/nvfp4_w4a16/tiled", "local/nvfp4_w4a16/tiled_amx"};
  EXPECT_EQ(got, expected);
}

TEST(Pairing, EveryValidTripleIsConstructible) {
  std::size_t n = 0;
  mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    static_assert(std::is_constructible_v<MoeLayer<A, Q, K>, MoeConfig, MoeWeights>);
    ++n;
  });
  EXPECT_EQ(n, mp::mp_size<valid_triples>::value);
  EXPECT_GE(n, 4u);
}
