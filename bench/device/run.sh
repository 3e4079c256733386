#!/bin/bash
# Device side of bench/device/pack.sh (see there): runs on the lent GPU machine from the
# repository root, with .dev/ and .gl/ carried. Writes to $OUT.
# Sections (SECTIONS="..." picks some, in this order; default: all but isa):
#   conformance  kiln_vulkan_tests under the validation layer
#   opsweep      the op sweep (tests/fixtures/op_sweep) on Vulkan
#   validate     the fixtures' self-tests on Vulkan
#   models       torchvision models exported there (PyTorch 2.11): Kiln Vulkan and CPU
#                (16 threads) against PyTorch CUDA eager and CPU; accuracy of each
#   ort2         Kiln against ONNX Runtime's CPU provider on that CPU, 2 threads
#   isa          the GEMM probe (AVX2 vs AVX-512 kernels, two K blocks) and GEMM tests on that
#                CPU, then as ort2 plus Kiln with KILN_CPU_ISA=avx2
#   conv         the blocked conv kernels per layer (kiln_nchwc_bench, 1 thread) on the
#                default and the AVX2 tables, block-group widths of the 1x1 layers, and
#                per-op profiles (2 threads) of the models
#   suites       the CPU kernel and runtime test suites on 16 cores
#   ort16        Kiln against ONNX Runtime, 16 threads
# MODELS overrides the model list.
set -u
R=$PWD; D=$R/.dev; W=/tmp/kw; mkdir -p $W
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
(cd $D && tar xf layer.tar.xz && tar xf bin.tar.xz)
export LD_LIBRARY_PATH=$D/lib VK_LAYER_PATH=$D/layer PATH=$D/bin:$PATH
# The test binaries find their fixtures under the source folder they were built in.
SRC=$(cat $D/source_dir); [ -e $SRC ] || { mkdir -p $(dirname $SRC) && ln -s $R $SRC; }
py() { env -u LD_LIBRARY_PATH python3 "$@"; }
nvidia-smi -L; nproc; uname -r; lscpu | grep -E "Model name|Model:|CPU family|L1d|L2|L3"; grep -o -w "avx512[a-z_]*\|amx[a-z_]*" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
probe() { timeout 60 kiln run $D/b/mlp.kiln --backend vulkan --input x=$D/b/mlp.x.npy >/tmp/probe.txt 2>&1; }
if ! probe; then
  cat /tmp/probe.txt
  for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f $j ] && { export VK_DRIVER_FILES=$j; echo "trying $j"; probe && break; cat /tmp/probe.txt; }
  done
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
if ! probe; then VK_LOADER_DEBUG=error,warn probe; tail -30 /tmp/probe.txt; echo NO_VULKAN; fi
tail -3 /tmp/probe.txt
M=${MODELS:-"resnet18 mobilenet_v2 resnet50 convnext_tiny densenet121 efficientnet_b0 regnet_y_1_6gf shufflenet_v2_x1_0 r3d_18"}
exported=0
export_models() {  # torch side, then kiln import; once per run
  [ $exported = 1 ] && return; exported=1
  echo "=== torch side $(el)"
  PYTHONUNBUFFERED=1 timeout 200 env -u LD_LIBRARY_PATH python3 $D/torch_side.py $W $M 2>&1 | grep -v -i warn | grep -v "cls.__new__\|torch.onnx.export(m" | cut -c1-400 | tee $OUT/torch_side.txt
  cp $W/torch_side.json $OUT/ 2>/dev/null
  for m in $M; do
    [ -f $W/$m.pt2 ] && { kiln import $W/$m.pt2 -o $W/$m.kiln > /dev/null 2>$W/err.txt || echo "$m: import failed: $(tail -2 $W/err.txt)"; }
  done
}
sec_conformance() {
  timeout 120 kiln_vulkan_tests --gtest_brief=1 --gtest_output=xml:$OUT/vulkan_tests.xml > $OUT/vulkan_tests.log 2>&1; echo "rc=$?"; tail -8 $OUT/vulkan_tests.log
}
sec_opsweep() {
  timeout 150 kiln_import_tests --gtest_brief=1 --gtest_filter='Torch26/OpSweep.*_vulkan:OpSweepList.*' > $OUT/op_sweep.log 2>&1; echo "rc=$?"; tail -12 $OUT/op_sweep.log
  if grep -q "Skipped" $OUT/op_sweep.log; then  # why the device is unavailable in this process
    VK_LOADER_DEBUG=error,warn,driver timeout 60 kiln_import_tests --gtest_filter='Torch26/OpSweep.*/acosh_core_vulkan' 2>&1 | head -60 | cut -c1-300
  fi
}
sec_validate() {
  for b in $D/b/*.kiln; do
    printf '%s: ' $(basename $b); timeout 60 kiln validate $b --backend vulkan > /tmp/v.txt 2>&1; echo "rc=$? $(tail -1 /tmp/v.txt)"
  done > $OUT/validate.txt 2>&1; grep -c "rc=0" $OUT/validate.txt; grep -v "rc=0" $OUT/validate.txt
}
sec_models() {
  export_models
  for m in $M; do
    [ -f $W/$m.kiln ] || continue
    for be in vulkan cpu; do
      rm -rf $W/o; timeout 60 kiln run $W/$m.kiln --backend $be --threads 16 --input x=$W/$m.x.npy --output-dir $W/o > /dev/null 2>$W/err.txt \
        && echo "$m $be accuracy $(py $D/compare_out.py $W/o/out0.npy $W/$m.ref.npy)" || echo "$m $be run failed: $(tail -2 $W/err.txt)"
    done
    echo "$m vulkan bench $(timeout 60 kiln bench $W/$m.kiln --backend vulkan --input x=$W/$m.x.npy --warmup 5 --iters 30 --json 2>&1 | py -c 'import json,sys; j=json.load(sys.stdin); print(j.get("median_ms"), j.get("p10_ms"))' 2>&1)"
    echo "$m cpu16 bench $(timeout 60 kiln bench $W/$m.kiln --backend cpu --threads 16 --input x=$W/$m.x.npy --warmup 3 --iters 30 --json 2>&1 | py -c 'import json,sys; j=json.load(sys.stdin); print(j.get("median_ms"), j.get("p10_ms"))' 2>&1)"
  done 2>&1 | tee $OUT/cnn.txt
}
sec_ort2() {
  export_models
  PYTHONUNBUFFERED=1 timeout 150 env -u LD_LIBRARY_PATH KILN_LD=$D/lib python3 $D/cpu_side.py $W 2 3 15 $M 2>&1 | tee $OUT/ort2.txt
}
sec_isa() {
  for v in gemm_probe_kc192 gemm_probe_kc256; do echo "$v"; timeout 60 $v; done 2>&1 | tee $OUT/gemm_probe.txt
  timeout 60 kiln_kernel_tests --gtest_brief=1 --gtest_filter='*Gemm*:*Pointwise*:*ConvPrepacked*' > $OUT/gemm_tests.log 2>&1; echo "gemm tests rc=$? $(grep -E '^\[  PASSED|FAILED' $OUT/gemm_tests.log | head -5 | tr '\n' ' ')"
  export_models
  PYTHONUNBUFFERED=1 timeout 240 env -u LD_LIBRARY_PATH KILN_LD=$D/lib KILN_ALT_ISA=avx2 python3 $D/cpu_side.py $W 2 3 15 $M 2>&1 | tee $OUT/isa2.txt
}
sec_conv() {
  for isa in default avx2; do
    echo "--- kiln_nchwc_bench, KILN_CPU_ISA=$isa"
    env KILN_CPU_ISA=$isa timeout 90 kiln_nchwc_bench --benchmark_filter='BM_Nchwc/.*threads:1/width:0/algo:0' \
      --benchmark_min_time=0.05 2>&1 | grep -E "^BM_" | sed -E 's|/real_time||; s/ +/ /g'
  done 2>&1 | tee $OUT/nchwc.txt
  timeout 90 kiln_nchwc_bench --benchmark_filter='BM_NchwcWidth/layer:([0-7]|1[7-9]|2[0-2])/' --benchmark_min_time=0.03 2>&1 |
    grep -E "^BM_" | sed -E 's|/real_time||; s/ +/ /g' > $OUT/nchwc_width.txt; wc -l < $OUT/nchwc_width.txt
  export_models
  for m in $M; do
    [ -f $W/$m.kiln ] || continue
    timeout 60 kiln bench $W/$m.kiln --threads 2 --input x=$W/$m.x.npy --iters 10 --profile > $OUT/profile_$m.txt 2>&1
    head -30 $OUT/profile_$m.txt | cut -c1-40,100-200
  done
}
sec_suites() {
  for t in kiln_kernel_tests kiln_runtime_tests; do
    timeout 90 $t --gtest_brief=1 > $OUT/$t.log 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|FAILED TEST|tests ran' $OUT/$t.log | head -5 | tr '\n' ' ')"
  done
}
sec_ort16() {
  export_models
  PYTHONUNBUFFERED=1 timeout 60 env -u LD_LIBRARY_PATH KILN_LD=$D/lib python3 $D/cpu_side.py $W 16 2 20 resnet18 mobilenet_v2 resnet50 2>&1 | tee $OUT/ort16.txt
}
for s in ${SECTIONS:-conformance opsweep validate models ort2 suites ort16}; do
  echo "=== $s $(el)"; sec_$s
done
echo "=== done $(el)"
