// Stand-in for CANN's graph/operator_reg.h (Ascend/metadef inc/external/graph/operator_reg.h):
// the REG_OP chain and the InferShape/verifier macros, reduced to what type-checks their use.
#ifndef EDGEFUSE_TEST_STUB_GRAPH_OPERATOR_REG_H_
#define EDGEFUSE_TEST_STUB_GRAPH_OPERATOR_REG_H_
#include <initializer_list>
#include <vector>

#include "graph/operator.h"

namespace ge {
struct TensorType {
  TensorType(std::initializer_list<DataType> types) : types(types) {}
  std::vector<DataType> types;
};

struct OpDefinition {
  explicit OpDefinition(const char* name) {}
  OpDefinition& Input(const char* name, const TensorType& types) { return *this; }
  OpDefinition& OptionalInput(const char* name, const TensorType& types) { return *this; }
  OpDefinition& Output(const char* name, const TensorType& types) { return *this; }
  OpDefinition& RequiredAttr(const char* name, const char* type) { return *this; }
  OpDefinition& Attr(const char* name, float value) { return *this; }
  OpDefinition& Attr(const char* name, int64_t value) { return *this; }
  OpDefinition& Attr(const char* name, std::vector<int64_t> value) { return *this; }
  int End(const char* name) { return 0; }
};

namespace attr_type {
inline float Float(double value) { return static_cast<float>(value); }
inline int64_t Int(int64_t value) { return value; }
inline std::vector<int64_t> ListInt(std::initializer_list<int64_t> value) { return value; }
}  // namespace attr_type
}  // namespace ge

#define REG_OP(x) static const int kRegistered##x = ::ge::OpDefinition(#x)
#define INPUT(x, t) Input(#x, ::ge::t)
#define OPTIONAL_INPUT(x, t) OptionalInput(#x, ::ge::t)
#define OUTPUT(x, t) Output(#x, ::ge::t)
#define REQUIRED_ATTR(x, Type) RequiredAttr(#x, #Type)
#define ATTR(x, Type, ...) Attr(#x, ::ge::attr_type::Type(__VA_ARGS__))
#define OP_END_FACTORY_REG(x) End(#x);

#define IMPLEMT_INFERFUNC(op_name, func_name) static graphStatus func_name(Operator& op)
#define IMPLEMT_VERIFIER(op_name, func_name) static graphStatus func_name(Operator& op)
#define INFER_FUNC_REG(op_name, x) static auto kInfer##op_name = &x
#define VERIFY_FUNC_REG(op_name, x) static auto kVerify##op_name = &x
#endif  // EDGEFUSE_TEST_STUB_GRAPH_OPERATOR_REG_H_
