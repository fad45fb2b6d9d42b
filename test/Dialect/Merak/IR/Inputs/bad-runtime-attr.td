// An op whose runtimeAttrFields names an attribute it does not have.
include "merak/Dialect/Merak/IR/MerakOps.td"

def Merak_BadOp : Merak_Op<"bad"> {
  let arguments = (ins Merak_Tensor:$input, I64Attr:$dim);
  let results = (outs Merak_Tensor:$result);
  let runtimeAttrFields = ["dims=dim"];
}
