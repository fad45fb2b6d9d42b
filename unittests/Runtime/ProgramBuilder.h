//===- ProgramBuilder.h - small rank programs built by hand in tests -*- C++
//-*-===//
//
// Tests of passes over `Program` (Fusion.h) build their programs here:
// arguments, instructions of any kind, results, then `planProgram`.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_UNITTESTS_RUNTIME_PROGRAMBUILDER_H
#define MERAK_UNITTESTS_RUNTIME_PROGRAMBUILDER_H

#include "merak/Runtime/Program.h"

#include <string>
#include <vector>

namespace merak::runtime::testing {

struct ProgramBuilder {
  Program program;

  ValueId value(DType dtype, std::vector<int64_t> shape) {
    ValueInfo info;
    info.type = TensorType{dtype, std::move(shape)};
    program.values.push_back(info);
    return ValueId(program.values.size() - 1);
  }
  /// An input argument of the given type.
  ValueId input(DType dtype, std::vector<int64_t> shape) {
    ValueId v = value(dtype, std::move(shape));
    Argument arg;
    arg.value = v;
    arg.role = ArgumentRole::Input;
    arg.name = "x" + std::to_string(v);
    program.arguments.push_back(arg);
    return v;
  }
  /// Appends an instruction; returns its result.
  ValueId op(OpKind kind, std::vector<ValueId> operands, DType dtype,
             std::vector<int64_t> shape, OpAttrs attrs = OpAttrs()) {
    ValueId v = value(dtype, std::move(shape));
    Instruction inst;
    inst.kind = kind;
    inst.attrs = attrs;
    inst.operands = std::move(operands);
    inst.results = {v};
    inst.location = "test.py:" + std::to_string(program.instructions.size());
    program.instructions.push_back(inst);
    return v;
  }
  /// Appends an instruction of several results; returns them.
  std::vector<ValueId> ops(OpKind kind, std::vector<ValueId> operands,
                           const std::vector<TensorType> &results,
                           OpAttrs attrs = OpAttrs()) {
    Instruction inst;
    inst.kind = kind;
    inst.attrs = attrs;
    inst.operands = std::move(operands);
    for (const TensorType &t : results)
      inst.results.push_back(value(t.dtype, t.shape));
    inst.location = "test.py:" + std::to_string(program.instructions.size());
    program.instructions.push_back(inst);
    return inst.results;
  }
  /// Same type as operand 0.
  ValueId op(OpKind kind, std::vector<ValueId> operands,
             OpAttrs attrs = OpAttrs()) {
    TensorType t = program.values[operands[0]].type;
    return op(kind, std::move(operands), t.dtype, t.shape, attrs);
  }
  void result(ValueId v) {
    ResultInfo r;
    r.value = v;
    program.results.push_back(r);
  }
  /// How many instructions of `kind` the program has.
  int count(OpKind kind) const {
    int n = 0;
    for (const Instruction &inst : program.instructions)
      n += inst.kind == kind;
    return n;
  }
};

} // namespace merak::runtime::testing

#endif // MERAK_UNITTESTS_RUNTIME_PROGRAMBUILDER_H
