#pragma once
// What the benches under mpirun share: the median of a rank's timings, and the slowest rank's.
#include <mpi.h>

#include <algorithm>
#include <vector>

namespace polymoe::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
inline double max_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

}  // namespace polymoe::bench
