#pragma once
// Umbrella header: every scalar number-format codec (bit-exact, constexpr).
#include <polymoe/codecs/bf16.hpp>
#include <polymoe/codecs/e2m1.hpp>
#include <polymoe/codecs/e4m3.hpp>
#include <polymoe/codecs/e5m2.hpp>
#include <polymoe/codecs/e8m0.hpp>
#include <polymoe/codecs/fp16.hpp>
