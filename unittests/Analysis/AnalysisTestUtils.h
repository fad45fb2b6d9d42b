//===- AnalysisTestUtils.h - parse MLIR for analysis tests ------*- C++ -*-===//
#ifndef MERAK_UNITTESTS_ANALYSIS_ANALYSISTESTUTILS_H
#define MERAK_UNITTESTS_ANALYSIS_ANALYSISTESTUTILS_H

#include "merak/Dialect/Merak/IR/MerakDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

namespace merak::testing {

/// An MLIR context with Merak's dialects and a parsed module.
struct ParsedModule {
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;

  explicit ParsedModule(llvm::StringRef source) {
    mlir::DialectRegistry registry;
    registerMerakDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  }

  mlir::func::FuncOp func(llvm::StringRef name) {
    return module ? module->lookupSymbol<mlir::func::FuncOp>(name) : nullptr;
  }
};

} // namespace merak::testing

#endif // MERAK_UNITTESTS_ANALYSIS_ANALYSISTESTUTILS_H
