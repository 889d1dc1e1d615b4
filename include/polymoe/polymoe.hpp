#pragma once
// Umbrella header: the core and every policy in the pairing table.
#include <polymoe/moe_layer.hpp>
#include <polymoe/policies.hpp>
