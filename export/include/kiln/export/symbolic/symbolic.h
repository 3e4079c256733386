// The symbolic shape engine in one include: expressions (expr.h), value ranges (range.h),
// the symbol table and facts (shape_env.h), printing (print.h), parsing (parse.h) and the
// bundle's postfix form (postfix.h). Everything lives in namespace kiln::sym.
#pragma once

#include "kiln/export/symbolic/expr.h"
#include "kiln/export/symbolic/parse.h"
#include "kiln/export/symbolic/postfix.h"
#include "kiln/export/symbolic/print.h"
#include "kiln/export/symbolic/range.h"
#include "kiln/export/symbolic/shape_env.h"
