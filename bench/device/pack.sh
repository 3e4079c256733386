#!/usr/bin/env bash
# Packs what bench/device/run.sh needs on a lent GPU machine (the workplace's `device`
# tool: it copies the working tree, and `carry` brings ignored folders) into .dev/ and
# .gl/ at the repository root (add both to .git/info/exclude): the stripped kiln CLI, the
# Vulkan conformance, import (op sweep), runtime and kernel test binaries, their shared
# libraries, the Khronos validation layer, the fixtures imported with their self-tests,
# and the Debian packages of the Vulkan loader and GL dispatch (that machine's image has
# the NVIDIA driver but not always the loader). Then, on the device tool:
#   run(command="bash .dev/run.sh", carry=[".gl", ".dev"], timeout_s=540)
# Results come back in $OUT: vulkan_tests.{log,xml}, op_sweep.log, validate.txt,
# torch_side.{txt,json} and cnn.txt (torchvision models exported there with torch.export
# and PyTorch 2.11: Kiln Vulkan/CPU vs PyTorch CUDA eager), ort2.txt and ort16.txt (Kiln
# vs ONNX Runtime on that machine's CPU), the CPU test suites' logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/dev}
D=.dev
rm -rf $D && mkdir -p $D/bin $D/lib $D/b .gl
for f in $B/bin/kiln $B/tests/kiln_vulkan_tests $B/tests/kiln_import_tests $B/tests/kiln_runtime_tests $B/tests/kiln_kernel_tests $B/bench/kiln_nchwc_bench; do strip -o $D/bin/$(basename $f) $f; done
# The GEMM probe, once per K block of the wide (AVX-512) tile, against the static runtime.
INC="-Ibase/include -I$B/schema/generated -Iruntime/include -Iruntime/src -Ischema/include"
for kc in 192 256; do
  g++ -O2 -std=c++20 $INC -DKILN_GEMM_KC_WIDE=$kc -c runtime/src/backends/cpu/gemm/gemm.cpp -o /tmp/kiln_gemm_kc$kc.o
  g++ -O2 -std=c++20 $INC bench/device/gemm_probe.cpp /tmp/kiln_gemm_kc$kc.o $B/runtime/libkiln_runtime.a -lpthread -s -o $D/bin/gemm_probe_kc$kc
done
for f in $D/bin/*; do ldd $f; done | awk '{print $3}' | sort -u |
  grep -v -E "libc\.so|libm\.so|libpthread|libdl|librt|ld-linux|libstdc\+\+|libgcc_s|^$" | xargs -r -I{} cp -L {} $D/lib/
mkdir -p /tmp/kiln-layer/layer
cp /usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so /tmp/kiln-layer/layer/
sed 's#"library_path": "libVk#"library_path": "./libVk#' /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json > /tmp/kiln-layer/layer/VkLayer_khronos_validation.json
(cd /tmp/kiln-layer && tar cJf "$OLDPWD/$D/layer.tar.xz" layer)
F=tests/fixtures/torch_export
for f in mlp convnet decoder cond_dyn cond_sizes dyn_int item_size nonzero repeated while_loop; do
  $B/bin/kiln import $F/$f/model.pt2 -o $D/b/$f.kiln --self-test-dir $F/$f > /dev/null
done
S=tests/fixtures/torch_export_stateful
for f in counter kv_decoder; do
  $B/bin/kiln import $S/$f/model.pt2 -o $D/b/$f.kiln --self-test-dir $S/$f > /dev/null
  $B/bin/kiln import $S/$f/model.core.pt2 -o $D/b/${f}_core.kiln --self-test-dir $S/$f > /dev/null
done
cp $F/mlp/cases/valid0.in.x.npy $D/b/mlp.x.npy
(cd $D && tar cJf bin.tar.xz bin lib && rm -rf bin lib)  # the tree that travels is capped at 64 MiB
cp bench/device/run.sh bench/device/torch_side.py bench/device/cpu_side.py bench/device/compare_out.py $D/
pwd > $D/source_dir
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
mkdir -p /tmp/amd64/partial && apt-get $o update > /dev/null
(cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 > /dev/null 2>&1)
du -sh $D .gl
