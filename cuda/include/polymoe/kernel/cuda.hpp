#pragma once
// kernel::cuda — the routed experts on an NVIDIA GPU (the CUDA component, polymoe::cuda): an
// expert kernel that computes in CUDA memory (space::cuda). Its rows are in polymoe::cuda_table
// (<polymoe/cuda_table.hpp>); a layer of it is polymoe::CudaMoeLayer<a2a::local, Q, kernel::cuda>
// for the schemes of its row (bf16, the W4A16 schemes, whose 4-bit weights stay 4-bit on the
// device, and the fp8 schemes on the fp8 tensor cores), whose forward takes device views and a
// stream (<polymoe/cuda/layer.hpp>).
//
// The header needs no CUDA header and no CUDA compiler (the pairing table and its diagnostics
// compile anywhere); running it links polymoe::cuda.
#include <string>
#include <string_view>
#include <type_traits>

#include <polymoe/core/formats.hpp>
#include <polymoe/core/memory_space.hpp>
#include <polymoe/core/roles.hpp>
#include <polymoe/cuda/experts.hpp>
#include <polymoe/quant/bf16.hpp>
#include <polymoe/quant/fp8.hpp>
#include <polymoe/quant/fp8_block.hpp>
#include <polymoe/quant/mxfp4.hpp>
#include <polymoe/quant/nvfp4.hpp>

namespace polymoe::kernel {

struct cuda {
  using kernel_concept = kernel_tag;
  using memory_space = space::cuda;
  static constexpr std::string_view name = "cuda";

  /// The GEMM tiles: by the mean rows an expert (automatic), or one shape for every batch.
  polymoe::cuda::TileChoice tiles = polymoe::cuda::TileChoice::automatic;

  /// The weights on the device, re-laid for the GEMMs (uploaded once, freed with the layer): bf16;
  /// the E2M1 codes and block scale codes of MXFP4 and NVFP4 weights as they are stored, with bf16
  /// activations; or E4M3 codes and their scales, with activations quantized to E4M3 on the device
  /// (the table's row lists the schemes whose arithmetic this is).
  template <class Q>
  using prepared = polymoe::cuda::Experts;

  template <class Q>
  [[nodiscard]] prepared<Q> prepare(typename Q::weights w) const {
    static_assert(std::is_constructible_v<polymoe::cuda::Experts, const typename Q::weights&>,
                  "polymoe: kernel::cuda holds bf16, MXFP4, NVFP4 and E4M3 (fp8, fp8_block) weights only");
    polymoe::cuda::Experts e(w);
    e.set_tiles(tiles);
    return e;
  }

  template <class Q>
  void run(const DispatchOutput<format::standard, space::cuda>& d, const prepared<Q>& p, const ExpertMlp& mlp,
           CombineInput<format::standard, space::cuda>& c) const {
    p.run(polymoe::cuda::routed_call{d.hidden, d.ids, d.weights, c.out, c.accumulate}, mlp, d.stream);
  }
  /// The ragged format (DeepEP normal): each slot's own output to its row of c.out (the
  /// per-expert counts are the sort's own).
  template <class Q>
  void run(const DispatchOutput<format::ragged, space::cuda>& d, const prepared<Q>& p, const ExpertMlp& mlp,
           CombineInput<format::ragged, space::cuda>& c) const {
    p.run(polymoe::cuda::routed_call{d.hidden, d.ids, d.weights, c.out, false, c.pair_rows}, mlp, d.stream);
  }
  /// The masked format (DeepEP low-latency) natively: no host synchronisation, graph-capturable.
  template <class Q>
  void run(const DispatchOutput<format::masked, space::cuda>& d, const prepared<Q>& p, const ExpertMlp& mlp,
           CombineInput<format::masked, space::cuda>& c) const {
    p.run(polymoe::cuda::masked_call{d.hidden, d.masked_m, d.capacity, c.out, d.expected_rows, d.max_rows}, mlp, d.stream);
  }

  /// One tile shape whatever the batch: a row's result then does not depend on the rows batched
  /// with it (the tile shape decides the order of its sums).
  [[nodiscard]] cuda batch_invariant() const {
    cuda k = *this;
    if (k.tiles == polymoe::cuda::TileChoice::automatic) k.tiles = polymoe::cuda::TileChoice::small;
    return k;
  }

  /// "NVIDIA H100 80GB HBM3 (sm_90), mma.sync": the current device.
  [[nodiscard]] std::string path() const {
    return polymoe::cuda::device_name(polymoe::cuda::current_device()) + ", mma.sync";
  }
};

}  // namespace polymoe::kernel
