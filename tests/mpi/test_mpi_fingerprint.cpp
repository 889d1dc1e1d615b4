// Ranks whose layers differ fail together, before any token moves, with the same
// "polymoe: rank N of S: <field> is <value> here but <value> on rank 0" on every rank: another
// dispatcher (which would otherwise leave the ranks in different collectives), quant scheme,
// kernel, shape, routing, router weights, shared expert (fp32 and pre-quantized), at 2, 3 and 4
// ranks, with N the lowest rank that differs. What may differ (tokens per rank, the routed experts
// each rank owns, mpi_masked's capacity) does not, and a layer built after a refused one works.
// Every failing case builds the layer and then runs a forward, so a rank that is not refused
// (the code before fingerprints) shows up as a failed check, a mixed result or a hang, which
// ctest's TIMEOUT ends. Prints "N passed, M failed" on rank 0; exits non-zero on any failure.
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "mpi_support.hpp"

using namespace polymoe;
using namespace polymoe::mpi_test;

namespace {

std::string prefix(int rank) { return "polymoe: rank " + std::to_string(rank) + " of " + std::to_string(size_) + ": "; }

/// Builds MpiMoeLayer<A, Q, K> from this rank's config and weights and runs one forward of its tokens
/// (router logits given, or computed by the layer's router when `p.logits` is empty); returns the
/// error, "" when there is none.
template <class A, class Q, class K, class W = MoeWeights>
std::string build_and_run(const Problem& p, const MoeConfig& cfg, W w) {
  try {
    MpiMoeLayer<A, Q, K> layer(ep_config(cfg), std::move(w), make_dispatcher<A>());
    const Matrix h = p.hidden.middleRows(p.first, p.count);
    const Matrix out = p.logits.size() ? layer.forward(h, p.logits.middleRows(p.first, p.count)) : layer.forward(h);
    (void)out;
  } catch (const error& e) {
    return e.what();
  }
  return {};
}

/// The last rank (or, from 3 ranks, ranks 1 and 2, in different ways) differs; every rank must
/// throw `expect` (the lowest differing rank's first differing field), or a message starting with
/// it when the values are checksums.
void expect_refusal(const std::string& what, const std::string& msg, const std::string& expect, bool whole = true) {
  const bool ok = whole ? same_everywhere(msg, expect) : (msg.rfind(expect, 0) == 0 && same_everywhere(msg, msg));
  check(ok, what + " is refused on every rank ('" + msg + "')");
}

int bad_rank() { return size_ - 1; }

template <class A>
void another_dispatcher_rank() {
  // Rank 0 (and all but the last) run mpi_ragged; the last runs A. Their forwards would call
  // different collectives (an all-gather against an all-to-all: a hang or garbage).
  const Problem p = make_problem({});
  const std::string msg = rank_ == bad_rank() ? build_and_run<A, quant::fp32, kernel::reference>(p, p.cfg, local_share(p))
                                              : build_and_run<a2a::mpi_ragged, quant::fp32, kernel::reference>(
                                                    p, p.cfg, local_share(p));
  expect_refusal(std::string(A::name) + " on rank " + std::to_string(bad_rank()) + ", mpi_ragged elsewhere", msg,
                 prefix(bad_rank()) + "dispatcher is " + std::string(A::name) + " here but mpi_ragged on rank 0");
}

void three_dispatchers() {
  if (size_ < 3) return;
  const Problem p = make_problem({});
  std::string msg;
  if (rank_ == 1)
    msg = build_and_run<a2a::mpi_allgather, quant::fp32, kernel::reference>(p, p.cfg, local_share(p));
  else if (rank_ == 2)
    msg = build_and_run<a2a::mpi_masked, quant::fp32, kernel::reference>(p, p.cfg, local_share(p));
  else
    msg = build_and_run<a2a::mpi_ragged, quant::fp32, kernel::reference>(p, p.cfg, local_share(p));
  expect_refusal("mpi_allgather on rank 1, mpi_masked on rank 2", msg,
                 prefix(1) + "dispatcher is mpi_allgather here but mpi_ragged on rank 0");
}

void another_quant_or_kernel() {
  const Problem p = make_problem({});
  const bool bad = rank_ == bad_rank();
  std::string msg = bad ? build_and_run<a2a::mpi_ragged, quant::bf16, kernel::reference>(p, p.cfg, local_share(p))
                        : build_and_run<a2a::mpi_ragged, quant::fp32, kernel::reference>(p, p.cfg, local_share(p));
  expect_refusal("quant bf16 on the last rank, fp32 elsewhere", msg, prefix(bad_rank()) + "quant is bf16 here but fp32 on rank 0");
  msg = bad ? build_and_run<a2a::mpi_masked, quant::fp32, kernel::tbb_grouped>(p, p.cfg, local_share(p))
            : build_and_run<a2a::mpi_masked, quant::fp32, kernel::reference>(p, p.cfg, local_share(p));
  expect_refusal("kernel tbb_grouped on the last rank, reference elsewhere", msg,
                 prefix(bad_rank()) + "kernel is tbb_grouped here but reference on rank 0");
}

/// A config field changed on the last rank (and, from 3 ranks, another on rank 1, which is named).
void config_fields() {
  struct Case {
    std::string field, here, there;
    std::function<void(Problem&)> change;
  };
  const std::vector<Case> cases = {
      {"hidden", "32", "24", [](Problem& p) { p = make_problem({.hidden = 32}); }},
      {"top_k", "2", "3", [](Problem& p) { p.cfg.router.top_k = 2; }},
      {"router.routed_scaling_factor", "2.5", "1", [](Problem& p) { p.cfg.router.routed_scaling_factor = 2.5f; }},
      {"router.method", "topk_softmax", "softmax_topk",
       [](Problem& p) { p.cfg.router.method = RoutingMethod::topk_softmax; }},
      {"router.renormalize", "false", "true", [](Problem& p) { p.cfg.router.renormalize = false; }},
      {"activation", "gelu_gated", "silu_gated", [](Problem& p) { p.cfg.activation = Activation::gelu_gated; }},
  };
  for (const Case& c : cases) {
    Problem p = make_problem({});
    if (rank_ == bad_rank()) c.change(p);
    std::string msg = build_and_run<a2a::mpi_ragged, quant::fp32, kernel::reference>(p, p.cfg, local_share(p));
    expect_refusal(c.field + " " + c.here + " on the last rank", msg,
                   prefix(bad_rank()) + c.field + " is " + c.here + " here but " + c.there + " on rank 0");
  }
  if (size_ >= 3) {  // rank 1 differs in top_k, rank 2 in hidden: rank 1 is named
    Problem p = make_problem({});
    if (rank_ == 2) p = make_problem({.hidden = 32});
    if (rank_ == 1) p.cfg.router.top_k = 2;
    const std::string msg = build_and_run<a2a::mpi_allgather, quant::fp32, kernel::reference>(p, p.cfg, local_share(p));
    expect_refusal("top_k on rank 1 and hidden on rank 2", msg, prefix(1) + "top_k is 2 here but 3 on rank 0");
  }
}

/// Weights every rank must hold alike: the router (its logits decide where every token goes) and
/// the shared expert, compared by checksum; also DeepSeek's correction bias.
void weights_that_must_match() {
  std::mt19937 rng(7);
  const Matrix router = randn(rng, E, 24, 0.3f);
  {
    Problem p = make_problem({});
    p.logits.resize(0, 0);  // the layer's router computes them
    MoeWeights w = local_share(p);
    w.router_weight = router;
    if (rank_ == bad_rank()) w.router_weight(3, 5) += 1e-6f;
    const std::string msg = build_and_run<a2a::mpi_ragged, quant::fp32, kernel::reference>(p, p.cfg, w);
    expect_refusal("a router weight changed on the last rank", msg,
                   prefix(bad_rank()) + "router_weight is " + std::to_string(E * 24) + " values, checksum ", false);
  }
  {
    Problem p = make_problem({.shared = true});
    MoeWeights w = local_share(p);
    if (rank_ == bad_rank()) w.shared->w2(1, 1) *= 2.0f;
    const std::string msg = build_and_run<a2a::mpi_allgather, quant::fp32, kernel::reference>(p, p.cfg, w);
    expect_refusal("a shared expert changed on the last rank", msg,
                   prefix(bad_rank()) + "shared expert weights is ", false);
  }
  {  // pre-quantized weights (fp8 blocks): the shared expert's values as the scheme decodes them
    Problem p = make_problem({.shared = true, .hidden = 300});
    MoeWeights f = local_share(p);
    if (rank_ == bad_rank()) f.shared->w13.row(4) *= -1.0f;
    BasicMoeWeights<quant::fp8_block::weights> w{quant::fp8_block::quantize(f.experts),
                                                  quant::fp8_block::quantize(*f.shared), f.shared_gate, {}, {}};
    const std::string msg =
        build_and_run<a2a::mpi_masked, quant::fp8_block, kernel::reference>(p, p.cfg, std::move(w));
    expect_refusal("a pre-quantized shared expert changed on the last rank", msg,
                   prefix(bad_rank()) + "shared expert weights is ", false);
  }
  {
    Problem p = make_problem({});
    p.cfg.router.method = RoutingMethod::sigmoid_grouped_topk;
    p.cfg.router.n_group = 3;
    p.cfg.router.topk_group = 2;
    p.cfg.router.correction_bias = Vector::LinSpaced(E, -0.1f, 0.1f);
    if (rank_ == bad_rank()) p.cfg.router.correction_bias[7] = 0.5f;
    const std::string msg = build_and_run<a2a::mpi_ragged, quant::fp32, kernel::reference>(p, p.cfg, local_share(p));
    expect_refusal("a correction bias changed on the last rank", msg,
                   prefix(bad_rank()) + "router.correction_bias is " + std::to_string(E) + " values, checksum ", false);
  }
}

/// What each rank has its own of: its tokens (the last rank has none, the others uneven shares),
/// its experts, mpi_masked's capacity. The layer builds and gives every rank its single-process
/// rows; so does a layer built right after a refused one (no rank left inside a collective).
void what_may_differ() {
  const Problem p = make_problem({.shared = true});
  MoeLayer<a2a::local, quant::fp32, kernel::reference> single(p.cfg, p.w);
  const Matrix want = single.forward(p.hidden, p.logits).middleRows(p.first, p.count);
  const auto same = [&](const Matrix& got) {
    return got.rows() == want.rows() && std::memcmp(got.data(), want.data(), sizeof(float) * got.size()) == 0;
  };
  {
    MpiMoeLayer<a2a::mpi_masked, quant::fp32, kernel::reference> layer(ep_config(p.cfg), local_share(p),
                                                                     a2a::mpi_masked(64 + 16 * rank_));
    check(same(layer.forward(p.hidden.middleRows(p.first, p.count), p.logits.middleRows(p.first, p.count))),
          "mpi_masked with another capacity on each rank gives the single-process rows");
  }
  if (size_ == 1) return;
  Problem q = p;
  if (rank_ == bad_rank()) q.cfg.router.top_k = 1;
  const std::string msg = build_and_run<a2a::mpi_allgather, quant::fp32, kernel::reference>(q, q.cfg, local_share(q));
  expect_refusal("top_k 1 on the last rank", msg, prefix(bad_rank()) + "top_k is 1 here but 3 on rank 0");
  MpiMoeLayer<a2a::mpi_allgather, quant::fp32, kernel::reference> layer(ep_config(p.cfg), local_share(p));
  check(same(layer.forward(p.hidden.middleRows(p.first, p.count), p.logits.middleRows(p.first, p.count))),
        "a layer built after a refused one gives the single-process rows");
}

}  // namespace

int main(int argc, char** argv) {
  start(argc, argv);
  what_may_differ();
  if (size_ > 1) {
    another_quant_or_kernel();
    config_fields();
    weights_that_must_match();
    three_dispatchers();
    another_dispatcher_rank<a2a::mpi_masked>();
    another_dispatcher_rank<a2a::mpi_allgather>();
  }
  return finish();
}
