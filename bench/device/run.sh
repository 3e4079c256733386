#!/bin/bash
# Device side of bench/device/pack.sh (see there): runs on the lent GPU machine from the
# repository root, with .dev/ and .gl/ carried.
# One device pass: Vulkan on a real GPU (conformance under the validation layer, fixture
# self-tests, torchvision CNNs vs PyTorch CUDA eager, micro-benchmarks). Writes to $OUT.
set -u
R=$PWD; D=$R/.dev; W=/tmp/kw; mkdir -p $W
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
(cd $D && tar xf layer.tar.xz && tar xf bin.tar.xz)
export LD_LIBRARY_PATH=$D/lib VK_LAYER_PATH=$D/layer PATH=$D/bin:$PATH
py() { env -u LD_LIBRARY_PATH python3 "$@"; }
nvidia-smi -L; nproc; uname -r
probe() { timeout 60 kiln run $D/b/mlp.kiln --backend vulkan --input x=$D/b/mlp.x.npy >/tmp/probe.txt 2>&1; }
if ! probe; then
  cat /tmp/probe.txt
  for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    [ -f $j ] && { export VK_DRIVER_FILES=$j; echo "trying $j: $(cat $j | tr -d '\n ')"; probe && break; cat /tmp/probe.txt; }
  done
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
if ! probe; then VK_LOADER_DEBUG=error,warn probe; tail -30 /tmp/probe.txt; echo NO_VULKAN; fi
cat /tmp/probe.txt | tail -3
echo "=== vulkan_bench $(date +%T)"
(cd $D/bin && timeout 90 ./kiln_vulkan_bench --benchmark_min_time=0.2 2>&1) | tee $OUT/vulkan_bench.txt
echo "=== conformance $(date +%T)"
timeout 240 kiln_vulkan_tests --gtest_brief=1 --gtest_output=xml:$OUT/vulkan_tests.xml > $OUT/vulkan_tests.log 2>&1; echo "rc=$?"; tail -25 $OUT/vulkan_tests.log
echo "=== fixture self-tests $(date +%T)"
for b in $D/b/*.kiln; do
  printf '%s: ' $(basename $b); timeout 60 kiln validate $b --backend vulkan > /tmp/v.txt 2>&1; echo "rc=$? $(tail -1 /tmp/v.txt)"
done 2>&1 | tee $OUT/validate.txt
echo "=== torch side $(date +%T)"
M="resnet18 mobilenet_v2 efficientnet_b0 mobilenet_v3_large squeezenet1_1"
PYTHONUNBUFFERED=1 timeout 180 env -u LD_LIBRARY_PATH python3 $D/torch_side.py $W $M 2>&1 | grep -v Warning | tail -12
cp $W/torch_side.json $OUT/ 2>/dev/null
echo "=== kiln cnn $(date +%T)"
for m in $M; do
  [ -f $W/$m.pt2 ] || continue
  kiln import $W/$m.pt2 -o $W/$m.kiln > /dev/null || { echo "$m: import failed"; continue; }
  in=$(kiln inspect $W/$m.kiln --json | py -c 'import json,sys; print(json.load(sys.stdin)["inputs"][0]["name"])')
  for be in vulkan cpu; do
    rm -rf $W/o; timeout 60 kiln run $W/$m.kiln --backend $be --input $in=$W/$m.x.npy --output-dir $W/o > /dev/null 2>$W/err.txt \
      && echo "$m $be accuracy $(py $D/compare_out.py $W/o/out0.npy $W/$m.ref.npy)" || echo "$m $be run failed: $(tail -2 $W/err.txt)"
  done
  echo "$m vulkan bench $(timeout 90 kiln bench $W/$m.kiln --backend vulkan --input $in=$W/$m.x.npy --warmup 5 --iters 50 --json 2>&1 | tr -d '\n' | cut -c1-900)"
  echo "$m cpu16 bench $(timeout 60 kiln bench $W/$m.kiln --backend cpu --threads 16 --input $in=$W/$m.x.npy --warmup 5 --iters 50 --json 2>&1 | py -c 'import json,sys; j=json.load(sys.stdin); print(j.get("median_ms"), j.get("p10_ms"))' 2>&1)"
done 2>&1 | tee $OUT/cnn.txt
timeout 60 kiln bench $W/resnet18.kiln --backend vulkan --input x=$W/resnet18.x.npy --iters 20 --profile > $OUT/resnet18_profile.txt 2>&1
timeout 60 kiln bench $W/mobilenet_v2.kiln --backend vulkan --input x=$W/mobilenet_v2.x.npy --iters 20 --profile > $OUT/mbv2_profile.txt 2>&1
head -60 $OUT/resnet18_profile.txt
echo "=== samples $(date +%T)"
{ for be in vulkan cpu; do echo "transformer $be: $(timeout 60 kiln bench $D/b/tr.kiln.s --backend $be --threads 16 --input ids=$D/b/tr.ids.npy --iters 50 --json 2>&1 | tr -d '\n' | cut -c1-600)"; done
for pos in 16 256 1000; do for be in vulkan cpu; do echo "kv decode pos $pos $be: $(timeout 60 kiln bench $D/b/kv.kiln.s --backend $be --threads 4 --input ids=$D/b/ids1.npy --input input_pos=$pos --iters 50 --json 2>&1 | tr -d '\n' | cut -c1-700)"; done; done; } | tee $OUT/samples.txt
echo "=== done $(date +%T)"
