// Stand-in for nlohmann/json's single header: the calls the generated plugins make
// (parse, operator[] on objects, iteration over arrays, is_string, get<T>), for -fsyntax-only.
#ifndef EDGEFUSE_TEST_STUB_JSON_HPP_
#define EDGEFUSE_TEST_STUB_JSON_HPP_
#include <map>
#include <string>
#include <vector>

namespace nlohmann {
class json {
 public:
  static json parse(const char* text) { return json(); }
  json operator[](const char* key) const { return json(); }
  bool is_string() const { return false; }
  template <typename T>
  T get() const { return T(); }
  std::vector<json>::const_iterator begin() const { return items_.begin(); }
  std::vector<json>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<json> items_;
};
}  // namespace nlohmann
#endif  // EDGEFUSE_TEST_STUB_JSON_HPP_
