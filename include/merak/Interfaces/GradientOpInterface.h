//===- GradientOpInterface.h - vector-Jacobian products of ops -*- C++ -*-===//
#ifndef MERAK_INTERFACES_GRADIENTOPINTERFACE_H
#define MERAK_INTERFACES_GRADIENTOPINTERFACE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"

#include "merak/Interfaces/GradientOpInterface.h.inc"

#endif // MERAK_INTERFACES_GRADIENTOPINTERFACE_H
