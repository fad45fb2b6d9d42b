//===- GradientOpInterface.cpp - vector-Jacobian products of ops ----------===//

#include "merak/Interfaces/GradientOpInterface.h"

#include "merak/Interfaces/GradientOpInterface.cpp.inc"
