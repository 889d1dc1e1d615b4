// The tiled kernel's first step: the (token, slot) pairs sorted by expert into row blocks.
//
// Sorted row n stands for slot slot_of[n] = t·k + j; the rows of expert e are
// [offsets[e], offsets[e+1]), in token order. Intermediate results live in sorted-row order, so an
// expert's rows are contiguous (the second GEMM reads them without a gather) and its row blocks
// are slices of them. The sort is stable, so the row a pair lands in depends on the routing only.
#include <polymoe/kernels/tiled/level_check.hpp>  // compiled once per level: no #pragma once
#if defined(POLYMOE_TILED_GUARD_SORT) == defined(POLYMOE_TILED_TOGGLE)
#ifdef POLYMOE_TILED_GUARD_SORT
#undef POLYMOE_TILED_GUARD_SORT
#else
#define POLYMOE_TILED_GUARD_SORT
#endif
#include <algorithm>
#include <cstdint>
#include <vector>

#include <polymoe/core/error.hpp>
#include <polymoe/core/types.hpp>

namespace polymoe::kernels::tiled {
POLYMOE_TILED_LEVEL_BEGIN

/// Rows [begin, begin + rows) of the sorted order, all routed to `expert`.
struct RowBlock {
  index_t expert, begin, rows;
};

/// One cell of a GEMM's 2-D grid: a row block times a column panel.
struct Task {
  std::int32_t block, panel;
};

/// The routing of one forward in expert order (buffers are reused between forwards).
struct ExpertRows {
  std::vector<index_t> offsets;  ///< [E + 1]
  std::vector<index_t> fill;     ///< scratch of the counting sort
  std::vector<index_t> slot_of;  ///< [N] sorted row -> slot t·k + j
  std::vector<index_t> row_of;   ///< [T·k] slot -> sorted row, or -1 for a slot not computed here
  std::vector<RowBlock> blocks;  ///< every expert's rows cut into blocks (see BlockCut)
  std::vector<index_t> first_block;  ///< [E + 1] blocks of expert e: [first_block[e], first_block[e+1])

  [[nodiscard]] index_t rows() const noexcept { return static_cast<index_t>(slot_of.size()); }
  /// Experts with at least one row.
  [[nodiscard]] index_t experts_with_rows() const noexcept {
    index_t n = 0;
    for (std::size_t e = 0; e + 1 < offsets.size(); ++e) n += offsets[e + 1] > offsets[e] ? 1 : 0;
    return n;
  }
  /// The row block of a task.
  [[nodiscard]] const RowBlock& block(const Task& t) const noexcept {
    return blocks[static_cast<std::size_t>(t.block)];
  }
};

/// How an expert's rows are cut into row blocks: at most max_rows each; with granule > 0 into as
/// few blocks as that allows, of similar size, each but the last a multiple of granule (130 rows,
/// 128 at most, granule 16: 80 + 50 rather than 128 + 2, which would leave a block too small for
/// AMX tiles); with granule 0, blocks of max_rows and a remainder.
struct BlockCut {
  index_t max_rows;
  index_t granule = 0;
};

/// Sorts the slots of `ids` [T, k] (local expert ids, -1 = skip) by expert and cuts row blocks.
inline void sort_by_expert(const IdMatrixCRef& ids, index_t num_experts, BlockCut cut, ExpertRows& s) {
  const index_t T = ids.rows(), k = ids.cols();
  const auto E = static_cast<std::size_t>(num_experts);
  s.offsets.assign(E + 1, 0);
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j) {
      const auto id = ids(t, j);
      require(id >= -1 && id < num_experts, "tiled kernel: local expert id ", id, " at [", t, ", ", j,
              "] is outside [-1, ", num_experts, ")");
      ++s.offsets[static_cast<std::size_t>(id + 1)];
    }
  // offsets[0] counted the skipped slots; drop them.
  s.offsets[0] = 0;
  for (std::size_t e = 0; e < E; ++e) s.offsets[e + 1] += s.offsets[e];
  s.fill.assign(s.offsets.begin(), s.offsets.end() - 1);
  s.slot_of.resize(static_cast<std::size_t>(s.offsets[E]));
  s.row_of.resize(static_cast<std::size_t>(T * k));
  for (index_t t = 0; t < T; ++t)
    for (index_t j = 0; j < k; ++j) {
      const auto id = ids(t, j);
      const index_t slot = t * k + j;
      if (id < 0) {
        s.row_of[static_cast<std::size_t>(slot)] = -1;
        continue;
      }
      const index_t row = s.fill[static_cast<std::size_t>(id)]++;
      s.slot_of[static_cast<std::size_t>(row)] = slot;
      s.row_of[static_cast<std::size_t>(slot)] = row;
    }
  s.blocks.clear();
  s.first_block.resize(E + 1);
  for (std::size_t e = 0; e < E; ++e) {
    s.first_block[e] = static_cast<index_t>(s.blocks.size());
    const index_t rows = s.offsets[e + 1] - s.offsets[e];
    index_t step = cut.max_rows;
    if (cut.granule > 0 && rows > 0) {
      const index_t blocks = (rows + cut.max_rows - 1) / cut.max_rows;
      step = std::min(cut.max_rows, ((rows + blocks - 1) / blocks + cut.granule - 1) / cut.granule * cut.granule);
    }
    for (index_t b = s.offsets[e]; b < s.offsets[e + 1]; b += step)
      s.blocks.push_back({static_cast<index_t>(e), b, std::min(step, s.offsets[e + 1] - b)});
  }
  s.first_block[E] = static_cast<index_t>(s.blocks.size());
}

/// The grid of one GEMM, expert by expert, panel by panel, row block by row block: consecutive
/// tasks share a panel, so a thread that runs a range of them reads each panel from memory once.
inline void make_tasks(const ExpertRows& s, index_t panels, std::vector<Task>& tasks) {
  tasks.clear();
  const index_t E = static_cast<index_t>(s.first_block.size()) - 1;
  for (index_t e = 0; e < E; ++e)
    for (index_t p = 0; p < panels; ++p)
      for (index_t b = s.first_block[static_cast<std::size_t>(e)]; b < s.first_block[static_cast<std::size_t>(e + 1)]; ++b)
        tasks.push_back({static_cast<std::int32_t>(b), static_cast<std::int32_t>(p)});
}

POLYMOE_TILED_LEVEL_END
}  // namespace polymoe::kernels::tiled
#endif  // POLYMOE_TILED_GUARD_SORT
