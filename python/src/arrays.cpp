// Arrays between Python and Prism: DLPack dtype codes to DTypes, owners handed to numpy as capsules.
#include "arrays.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "ir/error.h"

namespace prism::py {

static std::string DlName(nb::dlpack::dtype t) {
  const char* kind = "?";
  switch ((nb::dlpack::dtype_code)t.code) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Bool: kind = "bool"; break;
    default: break;
  }
  return std::string(kind) + std::to_string(t.bits);
}

DType ArrayDType(const InArray& a, const std::string& what) {
  auto t = a.dtype();
  using C = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    switch ((C)t.code) {
      case C::Float:
        if (t.bits == 32) return DType::F32;
        if (t.bits == 16) return DType::F16;
        break;
      case C::Bfloat:
        if (t.bits == 16) return DType::BF16;
        break;
      case C::Int:
        if (t.bits == 32) return DType::I32;
        if (t.bits == 8) return DType::I8;
        break;
      case C::UInt:
        if (t.bits == 8) return DType::U8;
        break;
      case C::Bool: return DType::Bool;
      default: break;
    }
  }
  throw Error(
      what + ": dtype " + DlName(t) +
      " is not one Prism takes (float32, float16, bfloat16, int32, int8, uint8, bool): cast it first");
}

HostTensor BorrowArray(const InArray& a, const std::string& what) {
  DType dt = ArrayDType(a, what);
  std::vector<int64_t> shape(a.ndim());
  for (size_t i = 0; i < a.ndim(); i++) shape[i] = (int64_t)a.shape(i);
  return HostTensor::Borrow(dt, std::move(shape), a.data());
}

static nb::dlpack::dtype NumpyDType(DType t) {
  switch (t) {
    case DType::F32: return nb::dtype<float>();
    case DType::I32: return nb::dtype<int32_t>();
    case DType::I8: return nb::dtype<int8_t>();
    case DType::U8: return nb::dtype<uint8_t>();
    case DType::Bool: return nb::dtype<bool>();
    default: throw Error("an output of dtype " + std::string(DTypeName(t)) + " has no numpy equivalent here");
  }
}

OutArray ToNumpy(HostTensor t) {
  auto* keep = new std::shared_ptr<void>(t.owner);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<void>*>(p); });
  std::vector<size_t> shape(t.shape.begin(), t.shape.end());
  return OutArray(t.data, shape.size(), shape.data(), owner, nullptr, NumpyDType(t.dtype));
}

OutArray ToNumpy(std::vector<float>&& v, std::vector<size_t> shape) {
  auto* keep = new std::vector<float>(std::move(v));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return OutArray(keep->data(), shape.size(), shape.data(), owner, nullptr, nb::dtype<float>());
}

std::vector<int32_t> TokenIds(const nb::handle& ids, const std::string& what) {
  std::vector<int32_t> out;
  if (nb::isinstance<nb::list>(ids) || nb::isinstance<nb::tuple>(ids)) {
    for (nb::handle h : ids) {
      if (!nb::isinstance<nb::int_>(h)) throw Error(what + ": token ids must be integers");
      out.push_back((int32_t)nb::cast<int64_t>(h));
    }
    return out;
  }
  nb::ndarray<nb::device::cpu> a;
  if (!nb::try_cast(ids, a)) throw Error(what + ": expected a list of token ids or an integer array");
  auto t = a.dtype();
  if (a.ndim() != 1 || ((nb::dlpack::dtype_code)t.code != nb::dlpack::dtype_code::Int &&
                        (nb::dlpack::dtype_code)t.code != nb::dlpack::dtype_code::UInt))
    throw Error(what + ": expected a rank-1 integer array of token ids, got rank " +
                std::to_string(a.ndim()) + " " + DlName(t));
  const int64_t stride = a.stride(0);
  for (size_t i = 0; i < a.shape(0); i++) {
    const char* p = static_cast<const char*>(a.data()) + (int64_t)i * stride * (t.bits / 8);
    int64_t v = t.bits == 64   ? *(const int64_t*)p
                : t.bits == 32 ? *(const int32_t*)p
                : t.bits == 16 ? *(const int16_t*)p
                               : *(const int8_t*)p;
    out.push_back((int32_t)v);
  }
  return out;
}

}  // namespace prism::py
