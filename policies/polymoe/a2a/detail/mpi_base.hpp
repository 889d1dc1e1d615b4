#pragma once
// What the MPI dispatchers share: the communicator, the check that MoeConfig's expert parallelism
// matches it, collective agreement on errors and on what the ranks' layers must share (their
// fingerprint, compared before any token moves), and the per-slot token exchange of the ragged and
// masked dispatchers (tokens out, per-slot results back, activations on a quantized wire where the
// scheme has one). Requires MPI (the polymoe::mpi CMake target); MPI_Init is the caller's.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <boost/mp11/list.hpp>

#include <polymoe/a2a/fingerprint.hpp>
#include <polymoe/core/config.hpp>
#include <polymoe/core/error.hpp>
#include <polymoe/core/expert_weights.hpp>
#include <polymoe/core/formats.hpp>
#include <polymoe/core/wire.hpp>
#include <polymoe/quantize/wire.hpp>

namespace polymoe::a2a::detail {

inline void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw error(std::string("MPI call ") + what + " failed");
}

/// A rank's place among the ranks of its host (MPI's shared-memory split of a communicator).
struct host_place {
  int rank = 0, size = 1;
};
/// Collective over `comm`.
inline host_place place_on_host(MPI_Comm comm, int rank) {
  MPI_Comm host = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
  host_place p;
  const int got_rank = MPI_Comm_rank(host, &p.rank), got_size = MPI_Comm_size(host, &p.size);
  MPI_Comm_free(&host);
  mpi_check(got_rank, "MPI_Comm_rank");
  mpi_check(got_size, "MPI_Comm_size");
  return p;
}

/// What the ranks of one expert-parallel layer must share, in the order it is compared: the
/// policies, the MoeConfig fields every rank's result depends on (not ep_rank, nor the tokens and
/// their count: each rank has its own), and checksums of the weights every rank holds whole (the
/// router, the shared expert and its gate; the routed experts are each rank's own share). A field
/// that only some layers have follows the field that decides it, so the field lists of two layers
/// stay aligned up to their first difference.
template <class A2A, class Quant, class Kernel, class Store>
fingerprint layer_fingerprint(const MoeConfig& c, const BasicMoeWeights<Store>& w) {
  const auto values = [](const auto& m) { return fingerprint::values(m); };
  fingerprint f;
  f.add("dispatcher", A2A::name).add("quant", Quant::name).add("kernel", Kernel::name);
  f.add("hidden", c.hidden).add("intermediate", c.intermediate).add("num_experts", c.num_experts);
  f.add("activation", to_string(c.activation));
  if (c.activation == Activation::swiglu_oai) f.add("swiglu_alpha", c.swiglu_alpha).add("swiglu_limit", c.swiglu_limit);
  f.add("expert_bias", c.expert_bias).add("router_weight_on_input", c.router_weight_on_input);
  const RouterConfig& r = c.router;
  f.add("router.method", to_string(r.method)).add("top_k", r.top_k).add("router.renormalize", r.renormalize);
  f.add("router.routed_scaling_factor", r.routed_scaling_factor);
  if (r.method == RoutingMethod::sigmoid_grouped_topk) {
    f.add("router.n_group", r.n_group).add("router.topk_group", r.topk_group);
    f.add_checksum("router.correction_bias", {values(r.correction_bias)});
  }
  f.add("shared_intermediate", c.shared_intermediate).add("shared_expert_gate", c.shared_expert_gate);
  f.add_checksum("router_weight", {values(w.router_weight)});
  f.add_checksum("router_bias", {values(w.router_bias)});
  f.add_checksum("shared_gate", {values(w.shared_gate)});
  if (!w.shared) {
    f.add_checksum("shared expert weights", {});
  } else if constexpr (std::is_same_v<Store, ExpertWeights>) {
    const ExpertWeights& s = *w.shared;
    f.add_checksum("shared expert weights", {values(s.w13), values(s.w2), values(s.b13), values(s.b2)});
  } else {  // a stored form: its values, as the scheme decodes them
    const Store& s = *w.shared;
    ExpertWeights d(ExpertShape{1, s.shape().hidden, s.shape().intermediate, s.shape().gated, false});
    Quant::dequantize(s, 0, d.w13_of(0), d.w2_of(0));
    f.add_checksum("shared expert weights", {values(d.w13), values(d.w2), values(s.b13), values(s.b2)});
  }
  return f;
}

class mpi_base {
 public:
  explicit mpi_base(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    require(initialized, "MPI dispatchers need MPI_Init to have been called");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  /// Called once by the layer (collectively, through agree): the config must describe this communicator.
  void configure(const MoeConfig& cfg) {
    require(cfg.ep_size == size_ && cfg.ep_rank == rank_, "MoeConfig says ep_rank ", cfg.ep_rank, " of ep_size ",
            cfg.ep_size, ", but this is rank ", rank_, " of an MPI communicator of size ", size_);
    local_experts_ = cfg.local_experts();
    weight_on_input_ = cfg.router_weight_on_input;
  }

  /// Every rank calls this with its own failure ("" if none). If any rank failed, every rank throws
  /// the same a2a::collective_error: the lowest failing rank's message, prefixed with that rank.
  void agree(const std::string& failure) const {
    int mine = failure.empty() ? size_ : rank_, first = size_;
    mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    if (first == size_) return;
    std::string msg = failure;
    int len = static_cast<int>(msg.size());
    mpi_check(MPI_Bcast(&len, 1, MPI_INT, first, comm_), "MPI_Bcast");
    msg.resize(static_cast<std::size_t>(len));
    mpi_check(MPI_Bcast(msg.data(), len, MPI_CHAR, first, comm_), "MPI_Bcast");
    if (msg.rfind("polymoe: ", 0) == 0) msg.erase(0, 9);
    throw collective_error(polymoe::detail::concat("rank ", first, " of ", size_, ": ", msg));
  }

  /// Collective, with the same fixed-size message on every rank whatever its layer or dispatcher:
  /// every rank compares its fingerprint with rank 0's; if any differs, every rank throws the same
  /// polymoe::error, "rank N of S: <field> is <value> here but <value> on rank 0", N being the
  /// lowest rank that differs and <field> the first field in which it does.
  void agree_fingerprint(const fingerprint& mine) const {
    fingerprint root = mine;
    mpi_check(MPI_Bcast(&root, static_cast<int>(sizeof root), MPI_BYTE, 0, comm_), "MPI_Bcast");
    agree(rank_ == 0 ? std::string() : mine.difference_from(root));
  }

  /// Called by the layer inside its agreed build step, before the weights move into the kernel's
  /// form: notes what every rank's layer must share (layer_fingerprint).
  template <class A2A, class Quant, class Kernel, class Store>
  void describe_layer(const MoeConfig& cfg, const BasicMoeWeights<Store>& w) {
    layer_ = layer_fingerprint<A2A, Quant, Kernel>(cfg, w);
  }
  /// Collective, once per layer, after every rank has built its own and before any token moves.
  void agree_on_layer() const { agree_fingerprint(layer_); }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }

 protected:
  static void displacements(const std::vector<int>& counts, std::vector<int>& displs, int scale = 1) {
    displs.resize(counts.size());
    int acc = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) displs[i] = acc, acc += counts[i] * scale;
  }
  static std::vector<int> scaled(const std::vector<int>& counts, int scale) {
    std::vector<int> s(counts);
    for (int& c : s) c *= scale;
    return s;
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  index_t local_experts_ = 0;
  bool weight_on_input_ = false;
  fingerprint layer_;
};

/// A contiguous MPI datatype of a given size in bytes (a row, a record), made when first needed
/// for that size and freed with its holder. A copy starts empty. Counts in MPI calls are then rows,
/// not bytes, so an exchange is not limited to 2 GiB per rank.
class contiguous_type {
 public:
  contiguous_type() = default;
  contiguous_type(const contiguous_type&) noexcept {}
  contiguous_type& operator=(const contiguous_type&) noexcept {
    reset();
    return *this;
  }
  ~contiguous_type() { reset(); }

  MPI_Datatype get(std::size_t bytes) {
    if (type_ != MPI_DATATYPE_NULL && bytes == bytes_) return type_;
    reset();
    require(bytes <= static_cast<std::size_t>(std::numeric_limits<int>::max()), "MPI exchange: a row of ", bytes,
            " bytes is larger than an MPI count can describe");
    mpi_check(MPI_Type_contiguous(static_cast<int>(bytes), MPI_BYTE, &type_), "MPI_Type_contiguous");
    mpi_check(MPI_Type_commit(&type_), "MPI_Type_commit");
    bytes_ = bytes;
    return type_;
  }

 private:
  void reset() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (type_ != MPI_DATATYPE_NULL && !finalized) MPI_Type_free(&type_);
    type_ = MPI_DATATYPE_NULL;
  }
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  std::size_t bytes_ = 0;
};

/// Tokens travel to the ranks that own their experts; one result per (token, slot) comes back.
///
/// Dispatch. A "wire row" is one token row bound for one rank, with the local expert ids of the
/// slots it serves there (-1 for the others): one per (token, destination rank) (rows_per::token,
/// DeepEP's normal mode: a token crosses to a rank once however many of its experts live there),
/// or one per (token, slot) (rows_per::slot: the low-latency mode, and layers whose routing weight
/// multiplies the input, where every slot's row differs). A wire row travels as one record
/// [int32 flag][k x int32 local ids][payload], the payload being wire_codec<Wire>'s encoding of the
/// row (fp32, or codes and amaxes when the quant scheme's activations are quantized); a row the
/// codec declines (non-finite or tiny values) is flagged and follows as fp32 in a second exchange.
/// The receiver expands each record into one row per slot it serves, in (source rank, record,
/// slot) order.
///
/// Combine. Each slot's result row travels back and the token's owner sums them in slot order,
/// starting from zero, as a single process's kernel sums a token's slots; each expert sees the
/// same rows in the same order as in a single process (the ranks' tokens in rank order), so the
/// routed experts' result is bitwise the single-process one, on every wire and with every kernel:
/// the wire formats are exact for their scheme (<polymoe/quantize/wire.hpp>). (The shared
/// expert runs on each rank's own tokens: bitwise too where the kernel's result for a row does
/// not depend on the rows batched with it.) mpi_allgather moves the tokens its own
/// way and returns the slots' results through the same combine (plan, return_rows, sum_slots).
class slot_exchange : public mpi_base {
 public:
  using mpi_base::mpi_base;
  /// Quantized activation wire formats the exchange carries (see <polymoe/core/wire.hpp>).
  using wires = boost::mp11::mp_list<wire::e4m3<128>, wire::e4m3<0>, wire::int8_rows>;

  /// Bytes this rank sent to other ranks in the last dispatch (records and fp32 rows) and combine.
  [[nodiscard]] std::size_t dispatch_bytes() const noexcept { return dispatch_bytes_; }
  [[nodiscard]] std::size_t combine_bytes() const noexcept { return combine_bytes_; }
  /// Wire rows this rank sent to other ranks in the last dispatch.
  [[nodiscard]] index_t dispatch_rows() const noexcept { return dispatch_rows_; }

 protected:
  enum class rows_per { token, slot };

  /// Plans the wire rows for ids [T, k] (global expert ids = rank · local_experts + local id):
  /// ordered by destination rank, then token (rows_per::token) or local expert, token, slot
  /// (rows_per::slot). Fills expert_counts_ (slots per destination rank and local expert).
  void plan(const IdMatrixCRef& ids, rows_per mode) {
    const index_t T = ids.rows(), k = ids.cols(), El = local_experts_;
    k_ = k;
    expert_counts_.assign(static_cast<std::size_t>(size_ * El), 0);
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < k; ++j) ++expert_counts_[ids(t, j)];
    slot_counts_.assign(static_cast<std::size_t>(size_), 0);
    wire_counts_.assign(static_cast<std::size_t>(size_), 0);
    for (int d = 0; d < size_; ++d)
      for (index_t e = 0; e < El; ++e) slot_counts_[d] += expert_counts_[d * El + e];
    position_.resize(static_cast<std::size_t>(T * k));
    wire_token_.clear();
    wire_slot_.clear();
    wire_ids_.clear();
    auto add_row = [&](int d, index_t t, index_t j) {
      wire_token_.push_back(t);
      wire_slot_.push_back(j);
      wire_ids_.resize(wire_ids_.size() + static_cast<std::size_t>(k), -1);
      ++wire_counts_[d];
    };
    if (mode == rows_per::slot) {
      std::vector<index_t>& fill = fill_;
      fill.assign(expert_counts_.size() + 1, 0);
      for (std::size_t g = 0; g < expert_counts_.size(); ++g) fill[g + 1] = fill[g] + expert_counts_[g];
      const auto n = static_cast<std::size_t>(T * k);
      wire_token_.resize(n);
      wire_slot_.resize(n);
      wire_ids_.assign(n * static_cast<std::size_t>(k), -1);
      for (index_t t = 0; t < T; ++t)
        for (index_t j = 0; j < k; ++j) {
          const index_t p = fill[ids(t, j)]++;
          wire_token_[p] = t;
          wire_slot_[p] = j;
          wire_ids_[p * k + j] = ids(t, j) % static_cast<std::int32_t>(El);
          position_[t * k + j] = p;
        }
      wire_counts_ = slot_counts_;
      return;
    }
    index_t p = 0;  // slot position in the returned rows: destination, token, slot
    for (int d = 0; d < size_; ++d)
      for (index_t t = 0; t < T; ++t) {
        bool first = true;
        for (index_t j = 0; j < k; ++j) {
          if (ids(t, j) / El != d) continue;
          if (first) add_row(d, t, -1), first = false;
          wire_ids_[wire_ids_.size() - static_cast<std::size_t>(k) + static_cast<std::size_t>(j)] =
              ids(t, j) % static_cast<std::int32_t>(El);
          position_[t * k + j] = p++;
        }
      }
  }

  /// Sends the planned wire rows (scaled by the slot's weight when it multiplies the input) in
  /// format Wire; `slots` receives one row per (received token, local expert), slot_ids_ its
  /// local expert.
  template <class Wire>
  void send(const MatrixCRef& hidden, const MatrixCRef& weights, Matrix& slots) {
    using codec = polymoe::quantize::wire_codec<Wire>;
    const index_t H = hidden.cols(), k = k_, n = static_cast<index_t>(wire_token_.size());
    const std::size_t head = 4 * static_cast<std::size_t>(1 + k), rec = head + codec::bytes(H);
    send_records_.resize(static_cast<std::size_t>(n) * rec);
    raw_counts_.assign(static_cast<std::size_t>(size_), 0);
    raw_rows_.clear();
    scaled_.resize(1, H);
    index_t w = 0;
    for (int d = 0; d < size_; ++d)
      for (int i = 0; i < wire_counts_[d]; ++i, ++w) {
        std::byte* r = send_records_.data() + static_cast<std::size_t>(w) * rec;
        const float* x = input_row(hidden, weights, w);
        const std::int32_t flag = codec::encode(x, H, r + head) ? 0 : 1;
        std::memcpy(r, &flag, 4);
        std::memcpy(r + 4, wire_ids_.data() + w * k, 4 * static_cast<std::size_t>(k));
        if (flag) raw_rows_.push_back(w), ++raw_counts_[d];
      }
    // Counts: wire rows and fp32 rows, per pair of ranks.
    counts_out_.resize(2 * static_cast<std::size_t>(size_));
    counts_in_.resize(counts_out_.size());
    for (int d = 0; d < size_; ++d) counts_out_[2 * d] = wire_counts_[d], counts_out_[2 * d + 1] = raw_counts_[d];
    mpi_check(MPI_Alltoall(counts_out_.data(), 2, MPI_INT, counts_in_.data(), 2, MPI_INT, comm_), "MPI_Alltoall");
    recv_wire_counts_.resize(static_cast<std::size_t>(size_));
    recv_raw_counts_.resize(static_cast<std::size_t>(size_));
    index_t n_in = 0, raw_in = 0;
    for (int s = 0; s < size_; ++s) {
      recv_wire_counts_[s] = counts_in_[2 * s], recv_raw_counts_[s] = counts_in_[2 * s + 1];
      n_in += recv_wire_counts_[s], raw_in += recv_raw_counts_[s];
    }
    recv_records_.resize(static_cast<std::size_t>(n_in) * rec);
    alltoallv(send_records_.data(), wire_counts_, recv_records_.data(), recv_wire_counts_, record_type_.get(rec));
    if constexpr (codec::quantized) {
      raw_send_.resize(static_cast<index_t>(raw_rows_.size()), H);
      for (std::size_t i = 0; i < raw_rows_.size(); ++i)
        std::memcpy(raw_send_.row(static_cast<index_t>(i)).data(), input_row(hidden, weights, raw_rows_[i]),
                    4 * static_cast<std::size_t>(H));
      raw_recv_.resize(raw_in, H);
      alltoallv(raw_send_.data(), raw_counts_, raw_recv_.data(), recv_raw_counts_, row_type_.get(4 * H));
    }
    dispatch_rows_ = 0;
    dispatch_bytes_ = 0;
    for (int d = 0; d < size_; ++d)
      if (d != rank_) {
        dispatch_rows_ += wire_counts_[d];
        dispatch_bytes_ += static_cast<std::size_t>(wire_counts_[d]) * rec +
                           static_cast<std::size_t>(raw_counts_[d]) * 4 * static_cast<std::size_t>(H);
      }
    // Expand: one row per slot a record serves.
    recv_slot_counts_.assign(static_cast<std::size_t>(size_), 0);
    const std::byte* r = recv_records_.data();
    for (int s = 0; s < size_; ++s)
      for (int i = 0; i < recv_wire_counts_[s]; ++i, r += rec)
        for (index_t j = 0; j < k; ++j) recv_slot_counts_[s] += record_id(r, j) >= 0;
    index_t n_slots = 0;
    for (int c : recv_slot_counts_) n_slots += c;
    slots.resize(n_slots, H);
    slot_ids_.resize(static_cast<std::size_t>(n_slots));
    r = recv_records_.data();
    index_t row = 0, raw = 0;
    for (index_t i = 0; i < n_in; ++i, r += rec) {
      std::int32_t flag;
      std::memcpy(&flag, r, 4);
      const index_t first = row;
      if (flag)
        slots.row(row) = raw_recv_.row(raw++);
      else
        codec::decode(r + head, H, slots.row(row).data());
      for (index_t j = 0; j < k; ++j) {
        const std::int32_t e = record_id(r, j);
        if (e < 0) continue;
        if (row != first) slots.row(row) = slots.row(first);
        slot_ids_[static_cast<std::size_t>(row++)] = e;
      }
    }
  }

  /// Returns one result row per received slot (in received order) to the token's owner; `back`
  /// gets this rank's slots in planned order.
  void return_rows(const Matrix& results, Matrix& back) {
    const index_t H = results.cols();
    back.resize(static_cast<index_t>(position_.size()), H);
    alltoallv(results.data(), recv_slot_counts_, back.data(), slot_counts_, row_type_.get(4 * H));
    combine_bytes_ = 0;
    for (int s = 0; s < size_; ++s)
      if (s != rank_) combine_bytes_ += static_cast<std::size_t>(recv_slot_counts_[s]) * 4 * static_cast<std::size_t>(H);
  }

  /// out[t] = sum over j, in slot order, of the returned row (times the weight when asked).
  void sum_slots(const Matrix& back, const MatrixCRef& weights, bool weighted, MatrixRef out) const {
    const index_t T = out.rows(), k = weights.cols();
    for (index_t t = 0; t < T; ++t) {
      out.row(t).setZero();
      for (index_t j = 0; j < k; ++j) {
        const index_t p = position_[t * k + j];
        if (weighted)
          out.row(t) += (back.row(p) * weights(t, j)).eval();
        else
          out.row(t) += back.row(p);
      }
    }
  }

  std::vector<int> expert_counts_;        ///< slots per (destination rank, local expert)
  std::vector<std::int32_t> slot_ids_;    ///< local expert of each received slot row
  std::vector<int> recv_slot_counts_;     ///< slot rows this rank computes for each source rank
  std::size_t dispatch_bytes_ = 0;        ///< see dispatch_bytes()
  index_t dispatch_rows_ = 0;             ///< see dispatch_rows()

 private:
  /// The row wire row w carries: the token's hidden row, or a copy scaled by its slot's weight.
  const float* input_row(const MatrixCRef& hidden, const MatrixCRef& weights, index_t w) {
    const index_t t = wire_token_[w], j = wire_slot_[w];
    if (!weight_on_input_ || j < 0) return hidden.row(t).data();
    scaled_.row(0) = hidden.row(t) * weights(t, j);
    return scaled_.data();
  }
  [[nodiscard]] std::int32_t record_id(const std::byte* r, index_t j) const noexcept {
    std::int32_t e;
    std::memcpy(&e, r + 4 * (1 + j), 4);
    return e;
  }
  template <class T>
  void alltoallv(const T* send, const std::vector<int>& scount, T* recv, const std::vector<int>& rcount,
                 MPI_Datatype type) {
    displacements(scount, sdispl_);
    displacements(rcount, rdispl_);
    mpi_check(MPI_Alltoallv(send, scount.data(), sdispl_.data(), type, recv, rcount.data(), rdispl_.data(), type,
                            comm_),
              "MPI_Alltoallv");
  }

  index_t k_ = 1;
  std::vector<int> slot_counts_, wire_counts_, raw_counts_, recv_wire_counts_, recv_raw_counts_;
  std::vector<int> counts_out_, counts_in_, sdispl_, rdispl_;
  std::vector<index_t> position_, wire_token_, wire_slot_, raw_rows_, fill_;
  std::vector<std::int32_t> wire_ids_;
  std::vector<std::byte> send_records_, recv_records_;
  Matrix scaled_, raw_send_, raw_recv_;
  contiguous_type record_type_, row_type_;
  std::size_t combine_bytes_ = 0;
};

}  // namespace polymoe::a2a::detail
