// training::run (training/run.h) until the training loop is merged: it reports that the loop is
// not part of this build. The trainer branch replaces this file with the real implementation.
#include "training/run.h"

#include "core/error.h"

namespace strata::training {

int run(const StrataConfig&) {
  STRATA_THROW_KIND(ErrorKind::Runtime, "the training loop lands with training/trainer.cpp");
}

}  // namespace strata::training
