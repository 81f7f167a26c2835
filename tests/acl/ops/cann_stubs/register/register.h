// Stand-in for CANN's register/register.h (Ascend/metadef inc/external/register/register.h):
// REGISTER_CUSTOM_OP and the OpRegistrationData builder calls the plugins make.
#ifndef EDGEFUSE_TEST_STUB_REGISTER_REGISTER_H_
#define EDGEFUSE_TEST_STUB_REGISTER_REGISTER_H_
#include <functional>
#include <vector>

#include "graph/operator.h"

namespace domi {
using Status = uint32_t;
const Status SUCCESS = 0;
const Status FAILED = 1;
enum FrameworkType { CAFFE = 0, TENSORFLOW = 3, ONNX = 5 };
enum class ImplyType { BUILDIN = 0, TVM, CUSTOM, AI_CPU };
using ParseParamByOpFunc = std::function<Status(const ge::Operator&, ge::Operator&)>;

class OpRegistrationData {
 public:
  explicit OpRegistrationData(const char* om_optype) {}
  OpRegistrationData& FrameworkType(const domi::FrameworkType& fmk_type) { return *this; }
  OpRegistrationData& OriginOpType(const std::vector<ge::AscendString>& types) { return *this; }
  OpRegistrationData& OriginOpType(const char* type) { return *this; }
  OpRegistrationData& ParseParamsByOperatorFn(const ParseParamByOpFunc& fn) { return *this; }
  OpRegistrationData& ImplyType(const domi::ImplyType& imply_type) { return *this; }
};

struct OpReceiver {
  OpReceiver(const OpRegistrationData& data) {}  // NOLINT: implicit as in CANN
};
}  // namespace domi

#define REGISTER_CUSTOM_OP_UNIQ(ctr, name) static ::domi::OpReceiver kRegister##ctr = \
    ::domi::OpRegistrationData(name)
#define REGISTER_CUSTOM_OP_HELPER(ctr, name) REGISTER_CUSTOM_OP_UNIQ(ctr, name)
#define REGISTER_CUSTOM_OP(name) REGISTER_CUSTOM_OP_HELPER(__COUNTER__, name)
#endif  // EDGEFUSE_TEST_STUB_REGISTER_REGISTER_H_
