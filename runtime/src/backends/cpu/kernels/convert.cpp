#include "backends/cpu/kernels/convert.h"

#include "backends/cpu/kernels/simd.h"

#include <cstring>

namespace kiln::cpu::kernels {
namespace {

template <DType To, DType From>
void convert_loop(const CType<From>* src, CType<To>* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = convert<To, From>(src[i]);
}

}  // namespace

void convert_buffer(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n) {
  if (n <= 0) return;
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memcpy(dst, src, static_cast<std::size_t>(n) * dtype_size(src_dtype));
    return;
  }
  const SimdKernels& k = simd();
  if (src_dtype == DType::kF32 && dst_dtype == DType::kF16 && k.f32_to_f16 != nullptr) {
    return k.f32_to_f16(static_cast<const float*>(src), static_cast<std::uint16_t*>(dst), n);
  }
  if (src_dtype == DType::kF16 && dst_dtype == DType::kF32 && k.f16_to_f32 != nullptr) {
    return k.f16_to_f32(static_cast<const std::uint16_t*>(src), static_cast<float*>(dst), n);
  }
  dispatch<KILN_ALL_DTYPES>(src_dtype, [&]<DType From>() {
    dispatch<KILN_ALL_DTYPES>(dst_dtype, [&]<DType To>() {
      convert_loop<To, From>(static_cast<const CType<From>*>(src), static_cast<CType<To>*>(dst), n);
    });
  });
}

void store_scalar(double value, void* dst, DType dtype) {
  dispatch<KILN_ALL_DTYPES>(dtype, [&]<DType D>() {
    const CType<D> v = convert<D, DType::kF64>(value);
    std::memcpy(dst, &v, sizeof(v));
  });
}

void fill_scalar(double value, void* dst, DType dtype, std::int64_t n) {
  if (n <= 0) return;
  dispatch<KILN_ALL_DTYPES>(dtype, [&]<DType D>() {
    const CType<D> v = convert<D, DType::kF64>(value);
    CType<D>* p = static_cast<CType<D>*>(dst);
    for (std::int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

double load_scalar(const void* src, DType dtype) {
  double out = 0.0;
  dispatch<KILN_ALL_DTYPES>(dtype, [&]<DType D>() {
    CType<D> v;
    std::memcpy(&v, src, sizeof(v));
    out = convert<DType::kF64, D>(v);
  });
  return out;
}

}  // namespace kiln::cpu::kernels
