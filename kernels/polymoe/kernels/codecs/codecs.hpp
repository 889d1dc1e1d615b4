#pragma once
// Umbrella header: every scalar number-format codec (bit-exact, constexpr).
#include <polymoe/kernels/codecs/bf16.hpp>
#include <polymoe/kernels/codecs/e2m1.hpp>
#include <polymoe/kernels/codecs/e4m3.hpp>
#include <polymoe/kernels/codecs/e5m2.hpp>
#include <polymoe/kernels/codecs/e8m0.hpp>
#include <polymoe/kernels/codecs/fp16.hpp>
