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
using diag = typename pairing::resolve<core_table, A, Q, K>::diagnostic;
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
template <class Q>
using models_quant_scheme = mp::mp_bool<quant_scheme<Q>>;
template <class K>
using models_expert_kernel = mp::mp_bool<expert_kernel<K>>;
static_assert(mp::mp_all_of<pairing::quants_of<core_table>, models_quant_scheme>::value);
static_assert(mp::mp_all_of<pairing::kernels_of<core_table>, models_expert_kernel>::value);
static_assert(can_make_layer<a2a::local, quant::mxfp4, kernel::tiled>);
static_assert(can_make_layer<a2a::local, quant::nvfp4_w4a4, kernel::tiled_amx>);
static_assert(can_make_layer<a2a::local, quant::mxfp4_w4a16, kernel::tiled_amx>);
static_assert(!can_make_layer<a2a::local, quant::fp32, kernel::tiled_amx>);
static_assert(is_diag<diag<a2a::local, quant::fp32, kernel::tiled_amx>, diagnostic::kernel_does_not_implement_quant_scheme>);

// What the core table says, stated without re-typing its lists: the generic kernels run every
// scheme, kernel::tiled every scheme too, kernel::tiled_amx every scheme but fp32 (AMX has no fp32
// tiles), and the local dispatcher pairs with each (scheme, kernel) the table allows.
template <class K>
constexpr std::size_t schemes_of = mp::mp_size<pairing::kernel_schemes<core_table, K>>::value;
constexpr std::size_t all_schemes = mp::mp_size<pairing::quants_of<core_table>>::value;
static_assert(schemes_of<kernel::reference> == all_schemes && schemes_of<kernel::tbb_grouped> == all_schemes);
static_assert(schemes_of<kernel::tiled> == all_schemes);
static_assert(schemes_of<kernel::tiled_amx> == all_schemes - 1 &&
              !mp::mp_contains<pairing::kernel_schemes<core_table, kernel::tiled_amx>, quant::fp32>::value);
static_assert(mp::mp_size<valid_triples>::value == 4 * all_schemes - 1);
static_assert(std::is_same_v<mp::mp_front<valid_triples>, mp::mp_list<a2a::local, quant::fp32, kernel::reference>>);
static_assert(std::is_same_v<pairing::dispatchers_of<core_table>, mp::mp_list<a2a::local>>);

// A table that extends the core table with a scheme and a kernel of a user's own: the generic
// kernels take the new scheme, the new kernel runs what its rows say, and the core table is
// unchanged by the extension.
struct user_table : pairing::extend<core_table,
                                    pairing::scheme_row<archetypes::UnlistedScheme, pairing::on<archetypes::UnlistedKernel>>,
                                    pairing::kernel_row<archetypes::UnlistedKernel, pairing::natives<format::standard>,
                                                        pairing::schemes<quant::bf16>>> {};
static_assert(can_make_layer_in<user_table, a2a::local, archetypes::UnlistedScheme, kernel::reference>);
static_assert(can_make_layer_in<user_table, a2a::local, archetypes::UnlistedScheme, kernel::tbb_grouped>);
static_assert(can_make_layer_in<user_table, a2a::local, archetypes::UnlistedScheme, archetypes::UnlistedKernel>);
static_assert(can_make_layer_in<user_table, a2a::local, quant::bf16, archetypes::UnlistedKernel>);
static_assert(!can_make_layer_in<user_table, a2a::local, quant::fp32, archetypes::UnlistedKernel>);
static_assert(!can_make_layer_in<user_table, a2a::local, archetypes::UnlistedScheme, kernel::tiled>);
static_assert(!can_make_layer<a2a::local, archetypes::UnlistedScheme, kernel::reference>);
static_assert(mp::mp_size<pairing::valid_triples_of<user_table>>::value == mp::mp_size<valid_triples>::value + 4);
static_assert(std::is_same_v<pairing::kernel_schemes<user_table, archetypes::UnlistedKernel>,
                             mp::mp_list<quant::bf16, archetypes::UnlistedScheme>>);  // in the table's scheme order
static_assert(is_diag<diag<a2a::local, quant::fp32, archetypes::UnlistedKernel>, diagnostic::kernel_not_in_pairing_table>);
static_assert(is_diag<typename pairing::resolve<user_table, a2a::local, quant::fp32, archetypes::UnlistedKernel>::diagnostic,
                      diagnostic::kernel_does_not_implement_quant_scheme>);

TEST(Pairing, ValidTriplesFollowTheTableOrder) {
  // dispatcher-major, then scheme, then kernel, each in the order of the table's rows
  std::vector<std::string> got;
  mp::mp_for_each<valid_triples>([&]<class A, class Q, class K>(mp::mp_list<A, Q, K>) {
    got.push_back(std::string(Q::name) + "/" + std::string(K::name));
  });
  ASSERT_EQ(got.size(), mp::mp_size<valid_triples>::value);
  EXPECT_EQ(got[0], "fp32/reference");
  EXPECT_EQ(got[1], "fp32/tbb_grouped");
  EXPECT_EQ(got[2], "fp32/tiled");
  EXPECT_EQ(got[3], "bf16/reference");
  EXPECT_EQ(got[6], "bf16/tiled_amx");
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
