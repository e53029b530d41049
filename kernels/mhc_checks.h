// The argument checks of the mHC ops of kernels/mhc.h that have an unfused composition
// (kernels/mhc_composed.h): each check takes its op's arguments (declared from the op by decltype)
// and throws the op's error naming the tensor. The dispatching op (kernels/mhc.cpp) and the
// composition both run it first, so bad input gets one message on either path.
#pragma once
#include "kernels/mhc.h"

namespace strata::kernels::mhc_checks {
STRATA_MHC_COMPOSED_OPS(STRATA_DECLARE_LIKE_OP)
}  // namespace strata::kernels::mhc_checks
