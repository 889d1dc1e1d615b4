#pragma once
// Replaces malloc and friends for one test program (every heap allocation of the process goes
// through them: operator new, aligned new, Eigen's aligned allocator, TBB), on top of glibc's own
// entry points. The program defines the two hooks:
//   void polymoe_test_acquired(void* p);  // p was just allocated (nullptr: the allocation failed)
//   void polymoe_test_releasing(void* p); // p is about to be freed (nullptr: nothing is)
// Include it in exactly one translation unit.
#include <cstddef>

void polymoe_test_acquired(void* p);
void polymoe_test_releasing(void* p);

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) {
  void* p = __libc_malloc(n);
  polymoe_test_acquired(p);
  return p;
}
void* calloc(std::size_t n, std::size_t m) {
  void* p = __libc_calloc(n, m);
  polymoe_test_acquired(p);
  return p;
}
void* realloc(void* p, std::size_t n) {
  polymoe_test_releasing(p);  // while its size is still known
  void* q = __libc_realloc(p, n);
  polymoe_test_acquired(q != nullptr || n == 0 ? q : p);  // a failed realloc leaves p held
  return q;
}
void* memalign(std::size_t a, std::size_t n) {
  void* p = __libc_memalign(a, n);
  polymoe_test_acquired(p);
  return p;
}
void* aligned_alloc(std::size_t a, std::size_t n) { return memalign(a, n); }
int posix_memalign(void** p, std::size_t a, std::size_t n) {
  *p = memalign(a, n);
  return *p ? 0 : 12;  // ENOMEM
}
void free(void* p) {
  polymoe_test_releasing(p);
  __libc_free(p);
}
}
