// Stand-in for CANN's graph/operator.h: only the declarations edgefuse's generated sources use,
// with the signatures of Ascend/metadef (inc/external/graph/operator.h, tensor.h, types.h).
// For `g++ -fsyntax-only` in the tests; nothing here is linked or run.
#ifndef EDGEFUSE_TEST_STUB_GRAPH_OPERATOR_H_
#define EDGEFUSE_TEST_STUB_GRAPH_OPERATOR_H_
#include <cstdint>
#include <string>
#include <vector>

namespace ge {
using graphStatus = uint32_t;
const graphStatus GRAPH_SUCCESS = 0;
const graphStatus GRAPH_FAILED = 0xFFFFFFFF;

enum DataType { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_INT32 = 3, DT_INT64 = 9 };

class AscendString {
 public:
  AscendString() = default;
  AscendString(const char* name) : name_(name) {}  // NOLINT: implicit as in CANN
  const char* GetString() const { return name_.c_str(); }

 private:
  std::string name_;
};

class Shape {
 public:
  Shape() = default;
  explicit Shape(const std::vector<int64_t>& dims) : dims_(dims) {}
  std::vector<int64_t> GetDims() const { return dims_; }

 private:
  std::vector<int64_t> dims_;
};

class TensorDesc {
 public:
  Shape GetShape() const { return shape_; }
  void SetShape(const Shape& shape) { shape_ = shape; }
  DataType GetDataType() const { return dtype_; }
  void SetDataType(DataType dtype) { dtype_ = dtype; }

 private:
  Shape shape_;
  DataType dtype_ = DT_FLOAT;
};

class Operator {
 public:
  Operator() = default;
  explicit Operator(const char* type) : type_(type) {}
  TensorDesc GetInputDescByName(const char* name) const;
  TensorDesc GetOutputDescByName(const char* name) const;
  graphStatus UpdateOutputDesc(const char* name, const TensorDesc& desc);
  graphStatus GetAttr(const char* name, int64_t& value) const;
  graphStatus GetAttr(const char* name, float& value) const;
  graphStatus GetAttr(const char* name, std::vector<int64_t>& value) const;
  graphStatus GetAttr(const char* name, AscendString& value) const;
  Operator& SetAttr(const char* name, int64_t value);
  Operator& SetAttr(const char* name, float value);
  Operator& SetAttr(const char* name, const std::vector<int64_t>& value);

 private:
  std::string type_;
};
}  // namespace ge
#endif  // EDGEFUSE_TEST_STUB_GRAPH_OPERATOR_H_
