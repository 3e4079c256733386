#!/bin/bash
# Device side of bench/device/pack.sh (see there): runs on the lent GPU machine from the
# repository root, with .dev/ and .gl/ carried.
# One device pass: Vulkan on a real GPU (conformance under the validation layer, the op
# sweep, fixture self-tests), torchvision models: Kiln Vulkan and CPU against PyTorch CUDA
# eager and against ONNX Runtime's CPU provider on the machine's CPU, the CPU test suites
# on 16 cores, samples. Writes to $OUT. MODELS overrides the model list.
set -u
R=$PWD; D=$R/.dev; W=/tmp/kw; mkdir -p $W
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s]"; }
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
(cd $D && tar xf layer.tar.xz && tar xf bin.tar.xz)
export LD_LIBRARY_PATH=$D/lib VK_LAYER_PATH=$D/layer PATH=$D/bin:$PATH
# The test binaries find their fixtures under the source folder they were built in.
SRC=$(cat $D/source_dir); [ -e $SRC ] || { mkdir -p $(dirname $SRC) && ln -s $R $SRC; }
py() { env -u LD_LIBRARY_PATH python3 "$@"; }
nvidia-smi -L; nproc; uname -r; lscpu | grep -E "Model name|Flags" | cut -c1-200
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
echo "=== conformance $(el)"
timeout 120 kiln_vulkan_tests --gtest_brief=1 --gtest_output=xml:$OUT/vulkan_tests.xml > $OUT/vulkan_tests.log 2>&1; echo "rc=$?"; tail -8 $OUT/vulkan_tests.log
echo "=== op sweep on vulkan $(el)"
timeout 150 kiln_import_tests --gtest_brief=1 --gtest_filter='Torch26/OpSweep.*_vulkan:OpSweepList.*' > $OUT/op_sweep.log 2>&1; echo "rc=$?"; tail -12 $OUT/op_sweep.log
echo "=== fixture self-tests $(el)"
for b in $D/b/*.kiln; do
  printf '%s: ' $(basename $b); timeout 60 kiln validate $b --backend vulkan > /tmp/v.txt 2>&1; echo "rc=$? $(tail -1 /tmp/v.txt)"
done > $OUT/validate.txt 2>&1; grep -c "rc=0" $OUT/validate.txt; grep -v "rc=0" $OUT/validate.txt
echo "=== torch side $(el)"
M=${MODELS:-"resnet18 mobilenet_v2 resnet50 convnext_tiny densenet121 efficientnet_b0 regnet_y_1_6gf shufflenet_v2_x1_0 r3d_18"}
PYTHONUNBUFFERED=1 timeout 200 env -u LD_LIBRARY_PATH python3 $D/torch_side.py $W $M 2>&1 | grep -v -i warn | cut -c1-400 | tee $OUT/torch_side.txt
cp $W/torch_side.json $OUT/ 2>/dev/null
echo "=== kiln on the gpu and cpu $(el)"
for m in $M; do
  [ -f $W/$m.pt2 ] || continue
  kiln import $W/$m.pt2 -o $W/$m.kiln > /dev/null 2>$W/err.txt || { echo "$m: import failed: $(tail -2 $W/err.txt)"; continue; }
  for be in vulkan cpu; do
    rm -rf $W/o; timeout 60 kiln run $W/$m.kiln --backend $be --threads 16 --input x=$W/$m.x.npy --output-dir $W/o > /dev/null 2>$W/err.txt \
      && echo "$m $be accuracy $(py $D/compare_out.py $W/o/out0.npy $W/$m.ref.npy)" || echo "$m $be run failed: $(tail -2 $W/err.txt)"
  done
  echo "$m vulkan bench $(timeout 60 kiln bench $W/$m.kiln --backend vulkan --input x=$W/$m.x.npy --warmup 5 --iters 30 --json 2>&1 | py -c 'import json,sys; j=json.load(sys.stdin); print(j.get("median_ms"), j.get("p10_ms"))' 2>&1)"
  echo "$m cpu16 bench $(timeout 60 kiln bench $W/$m.kiln --backend cpu --threads 16 --input x=$W/$m.x.npy --warmup 3 --iters 30 --json 2>&1 | py -c 'import json,sys; j=json.load(sys.stdin); print(j.get("median_ms"), j.get("p10_ms"))' 2>&1)"
done 2>&1 | tee $OUT/cnn.txt
timeout 30 kiln bench $W/resnet50.kiln --backend vulkan --input x=$W/resnet50.x.npy --iters 10 --profile > $OUT/resnet50_vk_profile.txt 2>&1
echo "=== kiln vs onnxruntime on this cpu, 2 threads $(el)"
PYTHONUNBUFFERED=1 timeout 150 env -u LD_LIBRARY_PATH KILN_LD=$D/lib python3 $D/cpu_side.py $W 2 3 15 $M 2>&1 | tee $OUT/ort2.txt
echo "=== cpu test suites, 16 cores $(el)"
for t in kiln_kernel_tests kiln_runtime_tests; do
  timeout 90 $t --gtest_brief=1 > $OUT/$t.log 2>&1; echo "$t rc=$? $(grep -E '^\[  PASSED|FAILED TEST|tests ran' $OUT/$t.log | head -5 | tr '\n' ' ')"
done
echo "=== kiln vs onnxruntime on this cpu, 16 threads $(el)"
PYTHONUNBUFFERED=1 timeout 60 env -u LD_LIBRARY_PATH KILN_LD=$D/lib python3 $D/cpu_side.py $W 16 2 20 resnet18 mobilenet_v2 resnet50 2>&1 | tee $OUT/ort16.txt
echo "=== done $(el)"
