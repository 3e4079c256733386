// The contract between the Vulkan lowering (C++, lower_*.cpp) and the compute shaders
// (GLSL, *.comp): push-constant slots and op codes. Included by both, so it holds only
// `#define`s of integer constants (valid C++ and GLSL): the shaders read P(PC_X_Y), the
// lowering writes push[PC_X_Y]; a slot or code is never spelled as a number elsewhere.
//
// Every dispatch gets one block of KILN_PUSH_WORDS 32-bit words (floats as their bits).
// PC_<SHADER>_<FIELD> is the word index of a field; a field that holds one value per dim
// takes KILN_MAX_DIMS (or the shader's own maximum) consecutive words from there.
#ifndef KILN_VULKAN_SHADER_ABI_H
#define KILN_VULKAN_SHADER_ABI_H

#define KILN_PUSH_WORDS 32
// The most dims a strided shader walks (after the lowering's coalescing).
#define KILN_MAX_DIMS 6

// ---- unary.comp: y = f(x), f32 -----------------------------------------------------------
#define PC_UNARY_N 0
#define PC_UNARY_OP 1     // UNARY_*
#define PC_UNARY_ALPHA 2  // f32 bits: clamp min, leaky_relu slope
#define PC_UNARY_BETA 3   // f32 bits: clamp max

#define UNARY_NEG 0
#define UNARY_ABS 1
#define UNARY_EXP 2
#define UNARY_LOG 3
#define UNARY_SQRT 4
#define UNARY_RSQRT 5
#define UNARY_RECIPROCAL 6
#define UNARY_SIN 7
#define UNARY_COS 8
#define UNARY_TANH 9
#define UNARY_SIGMOID 10
#define UNARY_RELU 11
#define UNARY_GELU 12
#define UNARY_GELU_TANH 13
#define UNARY_SILU 14
#define UNARY_HARDSWISH 15
#define UNARY_HARDSIGMOID 16
#define UNARY_ERF 17
#define UNARY_FLOOR 18
#define UNARY_CEIL 19
#define UNARY_ROUND 20
#define UNARY_SIGN 21
#define UNARY_CLAMP 22
#define UNARY_LEAKY_RELU 23
#define UNARY_ATAN 24
#define UNARY_ASIN 25
#define UNARY_ACOS 26
#define UNARY_TAN 27
#define UNARY_SINH 28
#define UNARY_COSH 29
#define UNARY_ASINH 30
#define UNARY_ACOSH 31
#define UNARY_ATANH 32

// ---- binary.comp: out = a (op) b, numpy broadcasting ---------------------------------------
// Variants: binary_f32 (BINARY_*), compare_f32 (COMPARE_*, bool out), logical_b32 (LOGICAL_*).
#define PC_BINARY_N 0
#define PC_BINARY_OP 1
#define PC_BINARY_RANK 2
#define PC_BINARY_SHAPE 3                                           // out shape
#define PC_BINARY_A_STRIDES (PC_BINARY_SHAPE + KILN_MAX_DIMS)       // 0 on broadcast dims
#define PC_BINARY_B_STRIDES (PC_BINARY_A_STRIDES + KILN_MAX_DIMS)
#define PC_BINARY_CONTIGUOUS (PC_BINARY_B_STRIDES + KILN_MAX_DIMS)  // 1: a, b, out share one layout

#define BINARY_ADD 0
#define BINARY_SUB 1
#define BINARY_MUL 2
#define BINARY_DIV 3
#define BINARY_DIV_TRUNC 4
#define BINARY_DIV_FLOOR 5
#define BINARY_POW 6
#define BINARY_MAXIMUM 7
#define BINARY_MINIMUM 8
#define BINARY_REMAINDER 9

#define COMPARE_EQ 0
#define COMPARE_NE 1
#define COMPARE_LT 2
#define COMPARE_LE 3
#define COMPARE_GT 4
#define COMPARE_GE 5

#define LOGICAL_AND 0
#define LOGICAL_OR 1
#define LOGICAL_XOR 2
#define LOGICAL_NOT 3  // of a (b unused)

// ---- where.comp: out = cond ? a : b, broadcast ---------------------------------------------
#define PC_WHERE_N 0
#define PC_WHERE_RANK 1
#define PC_WHERE_SHAPE 2
#define PC_WHERE_COND_STRIDES (PC_WHERE_SHAPE + KILN_MAX_DIMS)
#define PC_WHERE_A_STRIDES (PC_WHERE_COND_STRIDES + KILN_MAX_DIMS)
#define PC_WHERE_B_STRIDES (PC_WHERE_A_STRIDES + KILN_MAX_DIMS)

// ---- cast.comp: between device representations ---------------------------------------------
#define PC_CAST_N 0
#define PC_CAST_FROM 1  // DEVICE_*
#define PC_CAST_TO 2    // DEVICE_*

#define DEVICE_F32 0
#define DEVICE_I32 1
#define DEVICE_BOOL 2

// ---- copy.comp: strided copy of 32-bit words -----------------------------------------------
#define PC_COPY_N 0
#define PC_COPY_RANK 1
#define PC_COPY_SHAPE 2
#define PC_COPY_IN_STRIDES (PC_COPY_SHAPE + KILN_MAX_DIMS)
#define PC_COPY_OUT_STRIDES (PC_COPY_IN_STRIDES + KILN_MAX_DIMS)
#define PC_COPY_IN_OFFSET (PC_COPY_OUT_STRIDES + KILN_MAX_DIMS)
#define PC_COPY_OUT_OFFSET (PC_COPY_IN_OFFSET + 1)

// ---- fill.comp: a constant word, or an integer ramp ----------------------------------------
#define PC_FILL_N 0
#define PC_FILL_VALUE 1  // the word (FILL_CONSTANT) or the ramp's start
#define PC_FILL_MODE 2   // FILL_*
#define PC_FILL_STEP 3   // the ramp's step

#define FILL_CONSTANT 0
#define FILL_RAMP_F32 1
#define FILL_RAMP_I32 2

// ---- tri.comp: tril / triu over the last two dims ------------------------------------------
#define PC_TRI_N 0
#define PC_TRI_ROWS 1
#define PC_TRI_COLS 2
#define PC_TRI_DIAGONAL 3
#define PC_TRI_UPPER 4  // 1: triu

// ---- matmul.comp: C[b] = A[b] B[b] (+ bias) -------------------------------------------------
#define MATMUL_MAX_BATCH_DIMS 4
#define PC_MATMUL_M 0
#define PC_MATMUL_N 1
#define PC_MATMUL_K 2
#define PC_MATMUL_TRANS_B 3
#define PC_MATMUL_HAS_BIAS 4
#define PC_MATMUL_BATCH_RANK 5
#define PC_MATMUL_BATCH_DIMS 6
#define PC_MATMUL_A_BATCH_STRIDES (PC_MATMUL_BATCH_DIMS + MATMUL_MAX_BATCH_DIMS)
#define PC_MATMUL_B_BATCH_STRIDES (PC_MATMUL_A_BATCH_STRIDES + MATMUL_MAX_BATCH_DIMS)
#define PC_MATMUL_Z_OFFSET (PC_MATMUL_B_BATCH_STRIDES + MATMUL_MAX_BATCH_DIMS)  // batches > grid z

// ---- conv2d.comp: direct convolution, one invocation per output ----------------------------
#define PC_CONV2D_N 0
#define PC_CONV2D_C 1
#define PC_CONV2D_H 2
#define PC_CONV2D_W 3
#define PC_CONV2D_O 4
#define PC_CONV2D_OH 5
#define PC_CONV2D_OW 6
#define PC_CONV2D_KH 7
#define PC_CONV2D_KW 8
#define PC_CONV2D_STRIDE_H 9
#define PC_CONV2D_STRIDE_W 10
#define PC_CONV2D_PAD_H 11
#define PC_CONV2D_PAD_W 12
#define PC_CONV2D_DIL_H 13
#define PC_CONV2D_DIL_W 14
#define PC_CONV2D_GROUPS 15
#define PC_CONV2D_HAS_BIAS 16

// ---- conv2d_gemm.comp: implicit GEMM per group ---------------------------------------------
#define PC_CONVGEMM_OPG 0   // output channels per group (GEMM M)
#define PC_CONVGEMM_COLS 1  // N * OH * OW (GEMM N)
#define PC_CONVGEMM_K 2     // C/groups * KH * KW
#define PC_CONVGEMM_HAS_BIAS 3
#define PC_CONVGEMM_C 4
#define PC_CONVGEMM_H 5
#define PC_CONVGEMM_W 6
#define PC_CONVGEMM_OH 7
#define PC_CONVGEMM_OW 8
#define PC_CONVGEMM_KH 9
#define PC_CONVGEMM_KW 10
#define PC_CONVGEMM_STRIDE_H 11
#define PC_CONVGEMM_STRIDE_W 12
#define PC_CONVGEMM_PAD_H 13
#define PC_CONVGEMM_PAD_W 14
#define PC_CONVGEMM_DIL_H 15
#define PC_CONVGEMM_DIL_W 16
#define PC_CONVGEMM_O 17

// ---- pool.comp: 2-D pooling over planes ----------------------------------------------------
#define PC_POOL_N 0
#define PC_POOL_H 1
#define PC_POOL_W 2
#define PC_POOL_OH 3
#define PC_POOL_OW 4
#define PC_POOL_KH 5
#define PC_POOL_KW 6
#define PC_POOL_STRIDE_H 7
#define PC_POOL_STRIDE_W 8
#define PC_POOL_PAD_H 9
#define PC_POOL_PAD_W 10
#define PC_POOL_DIL_H 11
#define PC_POOL_DIL_W 12
#define PC_POOL_MODE 13  // POOL_*
#define PC_POOL_COUNT_INCLUDE_PAD 14

#define POOL_MAX 0
#define POOL_AVG 1
#define POOL_ADAPTIVE_AVG 2
#define POOL_ADAPTIVE_MAX 3

// ---- reduce.comp: one workgroup per output element -----------------------------------------
#define PC_REDUCE_N 0
#define PC_REDUCE_KEPT_RANK 1
#define PC_REDUCE_KEPT_DIMS 2
#define PC_REDUCE_KEPT_STRIDES (PC_REDUCE_KEPT_DIMS + KILN_MAX_DIMS)
#define PC_REDUCE_RED_RANK (PC_REDUCE_KEPT_STRIDES + KILN_MAX_DIMS)
#define PC_REDUCE_RED_DIMS (PC_REDUCE_RED_RANK + 1)
#define PC_REDUCE_RED_STRIDES (PC_REDUCE_RED_DIMS + KILN_MAX_DIMS)
#define PC_REDUCE_COUNT (PC_REDUCE_RED_STRIDES + KILN_MAX_DIMS)  // reduced elements per output
#define PC_REDUCE_OP (PC_REDUCE_COUNT + 1)                       // REDUCE_*
#define PC_REDUCE_CORRECTION (PC_REDUCE_OP + 1)                  // f32 bits (var)

#define REDUCE_SUM 0
#define REDUCE_MEAN 1
#define REDUCE_AMAX 2  // also any (reduce_b32)
#define REDUCE_AMIN 3  // also all (reduce_b32)
#define REDUCE_PROD 4
#define REDUCE_VAR 5

// ---- argreduce.comp: argmax / argmin along one dim -----------------------------------------
#define PC_ARGREDUCE_ROWS 0
#define PC_ARGREDUCE_D 1
#define PC_ARGREDUCE_INNER 2
#define PC_ARGREDUCE_OP 3  // ARGREDUCE_*

#define ARGREDUCE_MAX 0
#define ARGREDUCE_MIN 1

// ---- cumsum.comp ----------------------------------------------------------------------------
#define PC_CUMSUM_LINES 0
#define PC_CUMSUM_D 1
#define PC_CUMSUM_INNER 2

// ---- softmax.comp: softmax / log_softmax along one dim -------------------------------------
#define PC_SOFTMAX_ROWS 0
#define PC_SOFTMAX_D 1
#define PC_SOFTMAX_INNER 2
#define PC_SOFTMAX_LOG 3

// ---- layernorm.comp -------------------------------------------------------------------------
#define PC_LAYERNORM_ROWS 0
#define PC_LAYERNORM_N 1
#define PC_LAYERNORM_EPS 2  // f32 bits
#define PC_LAYERNORM_HAS_WEIGHT 3
#define PC_LAYERNORM_HAS_BIAS 4

// ---- batchnorm.comp (inference) -------------------------------------------------------------
#define PC_BATCHNORM_N 0
#define PC_BATCHNORM_C 1
#define PC_BATCHNORM_PLANE 2
#define PC_BATCHNORM_EPS 3  // f32 bits
#define PC_BATCHNORM_HAS_WEIGHT 4
#define PC_BATCHNORM_HAS_BIAS 5

// ---- index.comp: index_select / embedding (INDEX_SELECT) and gather (INDEX_GATHER) ----------
#define PC_INDEX_N 0
#define PC_INDEX_MODE 1      // INDEX_*
#define PC_INDEX_DIM_SIZE 2  // x's size along the indexed dim
#define PC_INDEX_COUNT 3     // INDEX_SELECT: index elements
#define PC_INDEX_INNER 4     // INDEX_SELECT: elements after the indexed dim
#define PC_GATHER_RANK 3     // INDEX_GATHER
#define PC_GATHER_DIM 4
#define PC_GATHER_SHAPE 5    // out (= index) shape
#define PC_GATHER_X_STRIDES (PC_GATHER_SHAPE + KILN_MAX_DIMS)

#define INDEX_SELECT 0
#define INDEX_GATHER 1

// ---- advindex.comp: x[..., i0, i1, i2, ...] on adjacent dims --------------------------------
#define ADVINDEX_MAX_INDICES 3
#define ADVINDEX_MAX_RANK 4  // of the broadcast index shape
#define PC_ADVINDEX_N 0
#define PC_ADVINDEX_K 1      // index tensors
#define PC_ADVINDEX_POST 2   // elements after the indexed dims
#define PC_ADVINDEX_BLOCK 3  // elements from the first indexed dim on
#define PC_ADVINDEX_NB 4     // elements of the broadcast index shape
#define PC_ADVINDEX_BRANK 5
#define PC_ADVINDEX_BSHAPE 6
// Index j's strides over the broadcast shape: ADVINDEX_MAX_RANK words each.
#define PC_ADVINDEX_STRIDES (PC_ADVINDEX_BSHAPE + ADVINDEX_MAX_RANK)
#define PC_ADVINDEX_SIZES (PC_ADVINDEX_STRIDES + ADVINDEX_MAX_INDICES * ADVINDEX_MAX_RANK)
#define PC_ADVINDEX_X_STRIDES (PC_ADVINDEX_SIZES + ADVINDEX_MAX_INDICES)

// ---- indexput.comp: index_put(x, values, index; dims=[dim], accumulate=false) ---------------
#define PC_INDEXPUT_N 0      // elements of the indexed shape: pre * count * post
#define PC_INDEXPUT_MODE 1   // INDEXPUT_*
#define PC_INDEXPUT_COUNT 2  // index elements
#define PC_INDEXPUT_POST 3   // elements after the indexed dim
#define PC_INDEXPUT_SIZE 4   // x's size along the indexed dim
#define PC_INDEXPUT_X_N 5    // elements of x
#define PC_INDEXPUT_TAG 6    // written to the error buffer's word 3 with an index out of range
#define INDEXPUT_SAVE 0      // in place: record each element's offset and old word (the undo log)
#define INDEXPUT_WRITE 1     // write the values, unless the error buffer is set
#define INDEXPUT_RESTORE 2   // put the recorded words back (a failed run)

#endif  // KILN_VULKAN_SHADER_ABI_H
