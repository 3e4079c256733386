# The declarative shader variant list: kiln_shader(<variant> <template> [DEFINE=VALUE...]).
# A variant is one op family x dtype x tile; the backend asks for it by name
# (find_shader("matmul_f32_t64")). Adding a row here adds a glslc step, an embedded
# SPIR-V array and a registry entry; see docs/ADDING_A_BACKEND.md.
#
#           variant              template          defines
kiln_shader(unary_f32            unary.comp)
kiln_shader(binary_f32           binary.comp)
kiln_shader(compare_f32          binary.comp       OUT_BOOL=1)
kiln_shader(compare_i32          binary.comp       OUT_BOOL=1 INT_IN=1)
kiln_shader(logical_b32          binary.comp       LOGICAL=1)
kiln_shader(where_x32            where.comp)
kiln_shader(copy_x32             copy.comp)
kiln_shader(fill_x32             fill.comp)
kiln_shader(tri_x32              tri.comp)
kiln_shader(cast_x32             cast.comp)
kiln_shader(matmul_f32_t64       matmul.comp       TM=4)
kiln_shader(matmul_f32_t32       matmul.comp       TM=2)
kiln_shader(conv2d_f32           conv2d.comp)
kiln_shader(pool_f32             pool.comp)
kiln_shader(reduce_f32           reduce.comp)
kiln_shader(reduce_b32           reduce.comp       BOOL_IO=1)
kiln_shader(softmax_f32          softmax.comp)
kiln_shader(layernorm_f32        layernorm.comp)
kiln_shader(batchnorm_f32        batchnorm.comp)
kiln_shader(index_x32            index.comp)
kiln_shader(conv2d_gemm_f32_t64  conv2d_gemm.comp  TM=4)
kiln_shader(conv2d_gemm_f32_t32  conv2d_gemm.comp  TM=2)
kiln_shader(argreduce_f32        argreduce.comp)
kiln_shader(cumsum_f32           cumsum.comp)
kiln_shader(advindex_x32          advindex.comp)
kiln_shader(indexput_x32          indexput.comp)
