// Arrays between Python and Prism without copies: DLPack or buffer-protocol arrays in, numpy arrays out.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>
#include <vector>

#include "ir/host_tensor.h"

namespace prism::py {

namespace nb = nanobind;

// Any C-contiguous CPU array (numpy, torch, anything speaking DLPack or the buffer protocol).
using InArray = nb::ndarray<nb::c_contig, nb::device::cpu>;
using OutArray = nb::ndarray<nb::numpy>;

// Borrows the array's memory as a HostTensor of the same dtype; throws prism::Error naming `what`, the
// dtype and the dtypes Prism takes (64-bit integers and floats are not among them: cast first).
HostTensor BorrowArray(const InArray& a, const std::string& what);
// The DType an array holds, under the same rule.
DType ArrayDType(const InArray& a, const std::string& what);

// Hands a HostTensor (owned memory) to numpy without copying; the array keeps it alive.
OutArray ToNumpy(HostTensor t);
// Moves a vector of floats into a numpy array of the given shape without copying.
OutArray ToNumpy(std::vector<float>&& v, std::vector<size_t> shape);

// Token ids from a Python list of ints or an integer array of rank 1 (any integer width).
std::vector<int32_t> TokenIds(const nb::handle& ids, const std::string& what);

}  // namespace prism::py
