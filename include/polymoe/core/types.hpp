#pragma once
// Basic vocabulary types: sizes and the Eigen matrices polymoe exchanges with callers.
#include <cstdint>

#include <Eigen/Core>

namespace polymoe {

using index_t = std::int64_t;

/// Row-major fp32 matrix: hidden states [T, H], logits [T, E], weights [rows, cols].
using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// Row-major int32 matrix: top-k expert ids [T, k].
using IdMatrix = Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
/// fp32 vector (biases, per-expert parameters).
using Vector = Eigen::Matrix<float, Eigen::Dynamic, 1>;

/// Read-only views accepted by the public API: any row-major fp32 / int32 matrix or block of one.
using MatrixCRef = Eigen::Ref<const Matrix>;
using IdMatrixCRef = Eigen::Ref<const IdMatrix>;
using MatrixRef = Eigen::Ref<Matrix>;

}  // namespace polymoe
