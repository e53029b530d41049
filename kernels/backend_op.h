// An op's backend functions declared from its specification: STRATA_BACKEND_OP(name) declares
// cpu::name and cuda::name with exactly the type of the public kernels::name (its signature,
// without the default arguments), so an op's signature is written once, in its public header, and
// changing it touches that header, the CPU file and the CUDA file only.
#pragma once

#define STRATA_BACKEND_OP(name)                     \
  namespace cpu {                                   \
  decltype(::strata::kernels::name) name;           \
  }                                                 \
  namespace cuda {                                  \
  decltype(::strata::kernels::name) name;           \
  }
