//===- KernelTable.h - a backend's kernel for each op kind ------*- C++ -*-===//
//
// Private to lib/Runtime: the table a backend runs an instruction by. Each
// op family file of a backend registers its kernels (`add`); the backend
// looks an instruction's kind up (`find`) and answers `supports` from the
// table, so an op is supported exactly when a kernel is registered for it.
// `Ctx` is the backend's view of one call (the CPU's and the CUDA
// backend's differ).
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_KERNELTABLE_H
#define MERAK_LIB_RUNTIME_KERNELTABLE_H

#include "merak/Runtime/Program.h"

#include <array>
#include <stdexcept>
#include <string>

namespace merak::runtime {

template <typename Ctx> class KernelTable {
public:
  /// A kernel: reads its operands from the context and sets every result.
  using Kernel = void (*)(Ctx &c);

  /// `backend` names the backend in the error of a second registration.
  explicit KernelTable(const char *backend) : backend(backend) {}

  /// Registers `kernel` for `kind`; a kind has at most one kernel, so a
  /// second registration throws `std::logic_error` naming the op.
  void add(OpKind kind, Kernel kernel) {
    Kernel &slot = kernels[size_t(kind)];
    if (slot)
      throw std::logic_error(std::string("the ") + backend +
                             " backend registers two kernels for " +
                             opFullName(kind));
    slot = kernel;
  }
  /// The kernel registered for `kind`, or null.
  Kernel find(OpKind kind) const { return kernels[size_t(kind)]; }

private:
  const char *backend;
  std::array<Kernel, kNumOpKinds> kernels{};
};

} // namespace merak::runtime

#endif // MERAK_LIB_RUNTIME_KERNELTABLE_H
