// Recurrent layers (aten.lstm / gru / rnn_tanh / rnn_relu and their cells), grid sampling,
// affine_grid and the training IR's 1-D / 3-D / nearest-exact upsampling, in one-node
// archives written by the test, against PyTorch's values (torch 1.13 nn.LSTM / nn.GRU /
// nn.RNN / F.grid_sample / F.affine_grid / F.interpolate on the inputs gen() makes; the
// same sin-based values for inputs and weights, see gen()).
#include <gtest/gtest.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/export/import_pt2.h"
#include "one_node_testutil.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json meta(const std::vector<std::int64_t>& sizes) {
  json s = json::array();
  for (auto v : sizes) s.push_back({{"as_int", v}});
  return {{"dtype", 7}, {"sizes", s}, {"requires_grad", false}, {"strides", json::array()}, {"layout", 7}};
}
json tensor_arg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json tensors_arg(const std::vector<std::string>& names) {
  json a = json::array();
  for (const auto& n : names) a.push_back({{"name", n}});
  return {{"as_tensors", a}};
}
json ints(std::vector<std::int64_t> v) { return {{"as_ints", v}}; }
json int_(std::int64_t v) { return {{"as_int", v}}; }
json bool_(bool v) { return {{"as_bool", v}}; }
json float_(double v) { return {{"as_float", v}}; }
json floats(std::vector<double> v) { return {{"as_floats", v}}; }
json none() { return {{"as_none", true}}; }

// One node `target(args) -> outputs`, every input a user input, every output a user output.
struct Node {
  std::string target;
  std::vector<std::pair<std::string, json>> args;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> inputs;
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> outputs;
  std::map<std::string, json> metas;  // tensor name -> meta override
  std::set<std::string> unused;       // node outputs that are not graph outputs
  json ranges = json::object();
};

std::string write_archive(const Node& op, const std::string& path) {
  testing::OneNodeArchive a{op.target, op.args};
  for (const auto& [name, shape] : op.inputs) a.inputs.emplace_back(name, meta(shape));
  for (const auto& [name, shape] : op.outputs) a.outputs.emplace_back(name, meta(shape));
  a.not_returned = op.unused, a.metas = op.metas, a.ranges = op.ranges;
  a.stack_trace = "File \"rnn.py\", line 3, in forward";
  return testing::write_one_node_archive(a, path);
}

Result<ExportedProgram> import_node(const Node& op) {
  const fs::path p = fs::temp_directory_path() / ("kiln_rnn_" + std::to_string(::getpid()) + ".pt2");
  auto ep = import_pt2(write_archive(op, p.string()));
  fs::remove(p);
  return ep;
}

// sin(0.37 i + seed) * scale, as refs.py makes the inputs and weights.
std::vector<float> gen(std::int64_t n, double seed, double scale = 1.0) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + seed) * scale);
  return v;
}

std::int64_t numel(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

HostValue f32(std::vector<std::int64_t> shape, const std::vector<float>& v) {
  HostTensor t{DType::kF32, std::move(shape), {}};
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return HostValue::of(std::move(t));
}

// Imports, runs and returns every output as floats (checking the declared shapes).
std::vector<std::vector<float>> run(const Node& op, const std::vector<std::vector<float>>& inputs) {
  auto ep = import_node(op);
  const auto program = testing::load_imported(ep);
  if (program == nullptr) return {};
  std::vector<HostValue> in;
  for (std::size_t i = 0; i < inputs.size(); ++i) in.push_back(f32(op.inputs[i].second, inputs[i]));
  Session s(*program);
  auto r = s.run(in);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  std::vector<std::vector<std::int64_t>> shapes;
  for (const auto& [name, shape] : op.outputs) {
    if (!op.unused.count(name)) shapes.push_back(shape);
  }
  EXPECT_EQ(r->outputs.size(), shapes.size());
  std::vector<std::vector<float>> out;
  for (std::size_t k = 0; k < r->outputs.size() && k < shapes.size(); ++k) {
    const HostTensor& t = r->outputs[k].tensor;
    EXPECT_EQ(t.shape, shapes[k]) << "output " << k;
    std::vector<float> v(t.data.size() / 4);
    std::memcpy(v.data(), t.data.data(), t.data.size());
    out.push_back(std::move(v));
  }
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-5 + 1e-4 * std::abs(want[i])) << what << " element " << i;
}

// PyTorch's values (torch 1.13 on gen()'s inputs and weights).
const std::vector<float> kLstmOut = {
    -0.020428706f, 0.26564983f, -0.042580072f, 0.050729036f, -0.035320353f, 0.38044074f, -0.029164605f, 0.052673016f,
    -0.054513369f, 0.43994421f, -0.018072126f, 0.053649075f, 0.021009637f, 0.25788799f, -0.047897063f, 0.079637162f,
    -0.02972262f, 0.40427914f, -0.055257101f, 0.064660564f, -0.049159031f, 0.46342558f, -0.079835765f, 0.041446302f};
const std::vector<float> kLstmH = {
    0.05243022f, 0.080596738f, -0.19137773f, 0.19150659f, 0.38538644f, 0.27854797f, -0.025327571f, 0.11956944f,
    -0.054513369f, 0.43994421f, -0.049159031f, 0.46342558f, -0.042580072f, 0.050729036f, -0.047897063f, 0.079637162f};
const std::vector<float> kLstmC = {
    -0.15883011f, -0.15610203f, 0.29341888f, 0.28406566f, 0.19471274f, 0.25823423f, 0.32257718f, 0.13950267f,
    -0.32497025f, -0.65044785f, -0.6258474f, -0.040758315f, -1.1082458f, -0.01348389f, 0.23359269f, 0.093330711f,
    -0.88835835f, -0.94558644f, -0.52175504f, -0.53735697f, -0.74072862f, -0.79597187f, -0.69890147f, -0.62807578f,
    0.26879358f, -0.17971438f, -0.19466159f, -0.23874432f, 0.26744387f, 0.087873355f, -0.20576701f, -0.62138563f};
const std::vector<float> kGruOut = {
    0.1903497f, 0.13476324f, 0.23720315f, 0.24598294f, -0.76455724f, 0.30516732f, -0.47602051f, 0.58350682f,
    0.41134495f, 0.32731616f, 0.29868746f, 0.27247369f, -0.7118752f, 0.14857906f, -0.28258353f, 0.54295737f,
    0.35839155f, 0.23030248f, 0.28982949f, 0.28641677f, -0.60433209f, 0.15440896f, -0.25385094f, 0.44593418f,
    0.53021169f, 0.16003466f, 0.3480837f, 0.29530641f, -0.83210784f, 0.29792362f, -0.44745761f, 0.45185912f,
    0.52950728f, 0.026078478f, 0.36780813f, 0.20493639f, -0.45909369f, 0.20002535f, -0.26637948f, 0.2982443f,
    0.61957997f, -0.0088801086f, 0.3939763f, 0.2738117f, -0.81495649f, 0.17642418f, -0.4569279f, 0.20861906f};
const std::vector<float> kGruH = {
    0.29507262f, 0.68261003f, 0.46973291f, 0.12387542f, 0.31389889f, 0.45604879f, 0.32775614f, 0.26858824f,
    0.039267287f, -0.65279603f, -0.81039584f, -0.44659212f, 0.07588923f, -0.47373101f, -0.84649211f, -0.16855782f,
    0.52950728f, 0.026078478f, 0.36780813f, 0.20493639f, 0.61957997f, -0.0088801086f, 0.3939763f, 0.2738117f,
    -0.76455724f, 0.30516732f, -0.47602051f, 0.58350682f, -0.7118752f, 0.14857906f, -0.28258353f, 0.54295737f};
const std::vector<float> kRnnOut = {
    0.76636708f, 0.0f, 0.0f, 0.0f, 1.6898546f, 0.71492499f, 0.0f, 0.0f,
    1.5796012f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.13783854f, 1.0559144f,
    0.0f, 0.0f, 0.40926304f, 1.8997669f, 0.0f, 0.0f, 0.0f, 1.4208459f};
const std::vector<float> kRnnH = {
    1.5796012f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.4208459f};
const std::vector<float> kLstmCellH = {
    -0.0085542267f, -0.00023432598f, 0.079977602f, 0.1622237f, -0.23322731f, -0.14623773f, 0.034422614f, 0.044693217f};
const std::vector<float> kLstmCellC = {
    -0.010127923f, -0.00036092103f, 0.19926843f, 0.36036408f, -0.2594102f, -0.21538055f, 0.13339072f, 0.15476853f};
const std::vector<float> kGruCellH = {
    -0.18533835f, -0.17552084f, 0.2640225f, 0.5297718f, -0.33211398f, -0.26859361f, 0.15475762f, 0.44937155f};
const std::vector<float> kGrid2d = {
    0.0f, 0.0f, 0.0f, 0.71161306f, 0.012546325f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.053067937f, -0.12380986f, 0.0f, -0.48730862f, -0.045983996f, -0.3813861f, 0.73020309f,
    0.15891078f, 0.0086890804f, 0.41396594f, 0.039063148f, 0.38812476f, 0.15861353f, -0.74595767f, -0.085745722f,
    -0.85647798f, -0.85647798f, -0.85647798f, 0.71161306f, 0.099833414f, 0.099833414f, 0.72757328f, 0.72757328f,
    0.72757328f, 0.053067937f, -0.98517776f, -0.98517776f, -0.85647798f, -0.85647798f, -0.71722728f, 0.73020309f,
    0.20956448f, 0.099833414f, 0.72757328f, 0.72757328f, 0.72989982f, 0.15861353f, -0.9837358f, -0.98517776f,
    -0.72036213f, -0.25170329f, -0.82606375f, 0.71161306f, 0.099833414f, 0.55721349f, 0.72984749f, 0.75938189f,
    0.75229579f, 0.053067937f, -0.98517776f, -0.61735082f, -0.32253954f, 0.10046491f, -0.60010129f, 0.73020309f,
    0.39527619f, 0.71570551f, 0.7363587f, 0.67594749f, 0.79834241f, 0.15861353f, -0.78128672f, -0.37889495f,
    0.0f, 0.0f, 0.0f, 0.73223144f, 0.0f, 0.0f, 0.0f, 0.0f,
    0.0f, 0.45895147f, 0.0f, 0.0f, -0.85647798f, 0.0f, -0.85647798f, 0.73223144f,
    0.099833414f, 0.0f, 0.72757328f, 0.0f, 0.72757328f, 0.45895147f, -0.98517776f, 0.0f,
    -0.85647798f, -0.85647798f, -0.85647798f, 0.73223144f, 0.099833414f, 0.099833414f, 0.72757328f, 0.72757328f,
    0.72757328f, 0.45895147f, -0.98517776f, -0.98517776f, -0.85647798f, -0.85647798f, -0.85647798f, 0.73223144f,
    0.099833414f, 0.099833414f, 0.72757328f, 0.72757328f, 0.72757328f, 0.45895147f, -0.98517776f, -0.98517776f,
    -0.85647798f, -0.61185789f, -0.85647798f, 0.73223144f, 0.099833414f, 0.45288628f, 0.72757328f, 0.9264155f,
    0.72757328f, 0.45895147f, -0.98517776f, -0.98053837f, -0.85647798f, 0.73223144f, -0.85647798f, 0.73223144f,
    0.099833414f, 0.92895973f, 0.72757328f, 0.45895147f, 0.72757328f, 0.45895147f, -0.98517776f, 0.10661169f,
    0.024581905f, -0.0051440597f, 0.051891766f, 0.92821026f, -0.0019388263f, 0.00091504207f, -0.018800797f, 0.0043698503f,
    -0.035186034f, 0.016378839f, -0.11433862f, -0.0090298336f, -0.64068329f, -0.049433861f, -0.4555431f, 0.89270431f,
    0.061613094f, -0.0096996017f, 0.41873631f, 0.030651314f, 0.40476626f, 0.12087942f, -0.953767f, -0.083435722f,
    -0.87628555f, -0.85647774f, -1.0001057f, 0.85913712f, 0.069606505f, 0.099833369f, 0.7114715f, 0.7275731f,
    0.72517365f, 0.057729617f, -0.99404949f, -0.98517722f, -1.0032158f, -0.96550894f, -0.77059293f, 0.86813945f,
    0.10431509f, 0.023908667f, 0.71733183f, 0.72349834f, 0.72450244f, 0.14739782f, -1.076111f, -1.0372455f,
    -0.79477233f, -0.31529295f, -1.0526121f, 0.85913712f, -0.0031334884f, 0.61522377f, 0.71058339f, 0.84640563f,
    0.7516619f, 0.057729617f, -1.0480229f, -0.72656024f, -0.5244841f, -0.026949616f, -0.76618624f, 0.86907214f,
    0.27734673f, 0.80009347f, 0.83174974f, 0.85140991f, 0.80123591f, 0.10569068f, -0.94120008f, -0.57425278f};
const std::vector<float> kGrid3d = {
    0.00013909212f, 0.0f, 0.54109979f, 0.0f, 0.0f, 0.412884f, 0.0f, 0.017233241f,
    0.38174084f, 0.14460838f, 0.66267991f, 0.032373451f, -0.053187229f, 0.60441875f, 0.14922172f, 0.17706911f,
    0.72757328f, 0.72757328f, 0.71502745f, 0.099833414f, 0.099833414f, 0.78513306f, 0.72757328f, 0.44196206f,
    0.7376169f, 0.59809732f, 0.66267991f, 0.099833414f, -0.12339388f, 0.60441875f, 0.72757328f, 0.26683795f,
    0.72757328f, 0.81000948f, 0.71502745f, 0.22684518f, 0.18099223f, 0.78513306f, 0.74461889f, 0.44196206f,
    0.45123053f, 0.69570607f, 0.66267991f, 0.23756282f, 0.064947218f, 0.60441875f, 0.53371966f, 0.32130748f,
    0.0f, 0.0f, 0.73223144f, 0.0f, 0.0f, 0.99987173f, 0.0f, 0.0f,
    0.72757328f, 0.0f, 0.73223144f, 0.099833414f, 0.0f, 0.10661169f, 0.72757328f, 0.72757328f,
    0.72757328f, 0.72757328f, 0.73223144f, 0.099833414f, 0.099833414f, 0.99987173f, 0.72757328f, 0.72757328f,
    0.72757328f, 0.72757328f, 0.73223144f, 0.099833414f, 0.099833414f, 0.10661169f, 0.72757328f, 0.72757328f,
    0.72757328f, 0.72757328f, 0.73223144f, 0.099833414f, 0.099833414f, 0.99987173f, 0.72757328f, 0.72757328f,
    0.72757328f, 0.9264155f, 0.73223144f, 0.099833414f, 0.45288628f, 0.10661169f, 0.72757328f, 0.72757328f};
const std::vector<float> kAffine2dF = {
    0.15247953f, -0.60559201f, 0.34718871f, -0.10651577f, 0.54189789f, 0.39256048f, 0.73660707f, 0.89163673f,
    0.61656976f, 0.029458821f, 0.81127888f, 0.52853507f, 1.005988f, 1.0276113f, 1.2006972f, 1.5266876f,
    1.0806599f, 0.66450965f, 1.275369f, 1.1635859f, 1.4700782f, 1.6626621f, 1.6647874f, 2.1617384f,
    -0.69104648f, -0.0089715123f, -0.44191563f, -0.28649002f, -0.19278485f, -0.56400841f, 0.056345955f, -0.84152687f,
    -0.59037131f, -0.55448961f, -0.3412405f, -0.83200812f, -0.092109688f, -1.1095265f, 0.15702112f, -1.387045f,
    -0.48969615f, -1.1000078f, -0.24056533f, -1.3775263f, 0.0085654706f, -1.6550446f, 0.25769627f, -1.9325631f};
const std::vector<float> kAffine2dT = {
    -0.17692006f, -1.1726555f, 0.082692146f, -0.50722051f, 0.34230435f, 0.15821445f, 0.60191655f, 0.82364947f,
    0.51921511f, -0.2200793f, 0.77882737f, 0.44535571f, 1.0384395f, 1.1107907f, 1.2980518f, 1.7762257f,
    1.2153504f, 0.73249692f, 1.4749626f, 1.3979319f, 1.7345748f, 2.0633669f, 1.994187f, 2.7288017f,
    -0.86594945f, 0.4025467f, -0.53377503f, 0.032522142f, -0.20160061f, -0.33750248f, 0.13057382f, -0.7075271f,
    -0.71493673f, -0.41573042f, -0.38276228f, -0.78575504f, -0.050587893f, -1.1557796f, 0.28158653f, -1.5258043f,
    -0.56392401f, -1.2340076f, -0.23174956f, -1.6040322f, 0.10042484f, -1.9740567f, 0.43259925f, -2.3440814f};
const std::vector<float> kAffine3d = {
    -0.11496353f, -1.0931218f, -0.083266556f, 0.27445477f, -0.14054549f, -0.29994172f, 0.34912658f, -0.57440621f,
    -0.45329124f, 0.73854494f, 0.37817001f, -0.66996634f, 0.81321675f, -0.055690706f, -0.82331586f, 1.202635f,
    0.89688545f, -1.0399909f, 0.79366988f, -0.59486002f, -0.90154374f, 1.1830883f, 0.35771614f, -1.1182188f,
    1.25776f, -0.076144576f, -1.2715683f, 1.6471784f, 0.87643164f, -1.4882433f, 1.7218502f, 0.44257092f,
    -1.641593f, 2.1112685f, 1.3951471f, -1.858268f};
const std::vector<float> kLinear1dScale = {
    0.099833414f, 0.23482423f, 0.44250241f, 0.61592686f, 0.77272737f, 0.88506436f, 0.9564324f, 0.99428046f,
    0.92895973f, 0.8537401f, 0.7380175f, 0.56691331f, 0.38420829f, 0.17544542f, -0.036886331f, -0.25213802f};
const std::vector<float> kTrilinearAc = {
    0.099833414f, 0.27635986f, 0.45288628f, 0.52970654f, 0.6522063f, 0.77470613f, 0.82974797f, 0.8815726f,
    0.93339723f, 0.99995762f, 0.9644587f, 0.92895973f, 0.41603243f, 0.43033755f, 0.44464266f, 0.41405922f,
    0.38966843f, 0.36527765f, 0.34006503f, 0.28460437f, 0.22914372f, 0.19404987f, 0.11514537f, 0.036240876f,
    0.73223144f, 0.58431524f, 0.43639907f, 0.29841191f, 0.12713055f, -0.044150796f, -0.1496179f, -0.31236386f,
    -0.47510982f, -0.61185789f, -0.73416793f, -0.85647798f};
const std::vector<float> kExact1d = {
    0.099833414f, 0.099833414f, 0.45288628f, 0.74464309f, 0.74464309f, 0.93561602f, 0.93561602f, 0.99995762f,
    0.92895973f, 0.92895973f, 0.73223144f, 0.43639907f, 0.43639907f, 0.081502154f, 0.081502154f, -0.28442571f};
const std::vector<float> kNearest3d = {
    0.099833414f, 0.099833414f, 0.45288628f, 0.099833414f, 0.099833414f, 0.45288628f, 0.74464309f, 0.74464309f,
    0.93561602f, 0.74464309f, 0.74464309f, 0.93561602f, 0.99995762f, 0.99995762f, 0.92895973f, 0.099833414f,
    0.099833414f, 0.45288628f, 0.099833414f, 0.099833414f, 0.45288628f, 0.74464309f, 0.74464309f, 0.93561602f,
    0.74464309f, 0.74464309f, 0.93561602f, 0.99995762f, 0.99995762f, 0.92895973f, 0.73223144f, 0.73223144f,
    0.43639907f, 0.73223144f, 0.73223144f, 0.43639907f, 0.081502154f, 0.081502154f, -0.28442571f, 0.081502154f,
    0.081502154f, -0.28442571f, -0.61185789f, -0.61185789f, -0.85647798f};
const std::vector<float> kNearest1d = {
    0.099833414f, 0.099833414f, 0.45288628f, 0.74464309f, 0.74464309f, 0.93561602f, 0.99995762f, 0.92895973f,
    0.92895973f, 0.73223144f, 0.43639907f, 0.43639907f, 0.081502154f, -0.28442571f};

using Shapes = std::vector<std::vector<std::int64_t>>;

// Adds the weights as inputs p0, p1, ... with values gen(n, 1 + k, 0.5); returns their names.
std::vector<std::string> add_params(Node& op, std::vector<std::vector<float>>& in, const Shapes& shapes) {
  std::vector<std::string> names;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    names.push_back("p" + std::to_string(k));
    op.inputs.push_back({names.back(), shapes[k]});
    in.push_back(gen(numel(shapes[k]), 1.0 + static_cast<double>(k), 0.5));
  }
  return names;
}

std::vector<std::pair<std::string, json>> rnn_args(const json& hx, const std::vector<std::string>& params, bool biases, std::int64_t layers,
                                                   bool bidir, bool batch_first) {
  return {{"input", tensor_arg("x")}, {"hx", hx},          {"params", tensors_arg(params)}, {"has_biases", bool_(biases)},
          {"num_layers", int_(layers)}, {"dropout", float_(0.0)}, {"train", bool_(false)}, {"bidirectional", bool_(bidir)},
          {"batch_first", bool_(batch_first)}};
}

TEST(ImportRecurrent, LstmTwoLayersBidirectionalProjectionBatchFirst) {
  Node op{"aten.lstm.input"};
  op.inputs = {{"x", {2, 3, 3}}, {"h0", {4, 2, 2}}, {"c0", {4, 2, 4}}};
  std::vector<std::vector<float>> in{gen(18, 0.1), gen(16, 0.2, 0.3), gen(32, 0.3, 0.3)};
  Shapes shapes;
  for (int l = 0; l < 2; ++l)
    for (int d = 0; d < 2; ++d) shapes.insert(shapes.end(), {{16, l == 0 ? 3 : 4}, {16, 2}, {16}, {16}, {2, 4}});
  const auto params = add_params(op, in, shapes);
  op.args = rnn_args(tensors_arg({"h0", "c0"}), params, true, 2, true, true);
  op.outputs = {{"y", {2, 3, 4}}, {"hn", {4, 2, 2}}, {"cn", {4, 2, 4}}};
  const auto out = run(op, in);
  ASSERT_EQ(out.size(), 3u);
  expect_near(out[0], kLstmOut, "output");
  expect_near(out[1], kLstmH, "h_n");
  expect_near(out[2], kLstmC, "c_n");
  // Only the final states used (the sequence output is dead).
  op.unused = {"y"};
  const auto states = run(op, in);
  ASSERT_EQ(states.size(), 2u);
  expect_near(states[0], kLstmH, "h_n alone");
  expect_near(states[1], kLstmC, "c_n alone");
}

TEST(ImportRecurrent, GruTwoLayersBidirectionalTimeMajor) {
  Node op{"aten.gru.input"};
  op.inputs = {{"x", {3, 2, 3}}, {"h0", {4, 2, 4}}};
  std::vector<std::vector<float>> in{gen(18, 0.1), gen(32, 0.2, 0.3)};
  Shapes shapes;
  for (int l = 0; l < 2; ++l)
    for (int d = 0; d < 2; ++d) shapes.insert(shapes.end(), {{12, l == 0 ? 3 : 8}, {12, 4}, {12}, {12}});
  const auto params = add_params(op, in, shapes);
  op.args = rnn_args(tensor_arg("h0"), params, true, 2, true, false);
  op.outputs = {{"y", {3, 2, 8}}, {"hn", {4, 2, 4}}};
  const auto out = run(op, in);
  ASSERT_EQ(out.size(), 2u);
  expect_near(out[0], kGruOut, "output");
  expect_near(out[1], kGruH, "h_n");
}

TEST(ImportRecurrent, RnnReluWithoutBiases) {
  Node op{"aten.rnn_relu.input"};
  op.inputs = {{"x", {2, 3, 3}}, {"h0", {1, 2, 4}}};
  std::vector<std::vector<float>> in{gen(18, 0.1), gen(8, 0.2, 0.3)};
  const auto params = add_params(op, in, {{4, 3}, {4, 4}});
  op.args = rnn_args(tensor_arg("h0"), params, false, 1, false, true);
  op.outputs = {{"y", {2, 3, 4}}, {"hn", {1, 2, 4}}};
  const auto out = run(op, in);
  ASSERT_EQ(out.size(), 2u);
  expect_near(out[0], kRnnOut, "output");
  expect_near(out[1], kRnnH, "h_n");
}

TEST(ImportRecurrent, LstmAndGruCells) {
  Node lstm{"aten.lstm_cell.default"};
  lstm.inputs = {{"x", {2, 3}}, {"h0", {2, 4}}, {"c0", {2, 4}}};
  std::vector<std::vector<float>> in{gen(6, 0.1), gen(8, 0.2, 0.3), gen(8, 0.3, 0.3)};
  auto p = add_params(lstm, in, {{16, 3}, {16, 4}, {16}, {16}});
  lstm.args = {{"input", tensor_arg("x")}, {"hx", tensors_arg({"h0", "c0"})}, {"w_ih", tensor_arg(p[0])},
               {"w_hh", tensor_arg(p[1])}, {"b_ih", tensor_arg(p[2])},     {"b_hh", tensor_arg(p[3])}};
  lstm.outputs = {{"h", {2, 4}}, {"c", {2, 4}}};
  auto out = run(lstm, in);
  ASSERT_EQ(out.size(), 2u);
  expect_near(out[0], kLstmCellH, "lstm h");
  expect_near(out[1], kLstmCellC, "lstm c");

  Node gru{"aten.gru_cell.default"};
  gru.inputs = {{"x", {2, 3}}, {"h0", {2, 4}}};
  std::vector<std::vector<float>> gin{gen(6, 0.1), gen(8, 0.2, 0.3)};
  p = add_params(gru, gin, {{12, 3}, {12, 4}, {12}, {12}});
  gru.args = {{"input", tensor_arg("x")}, {"hx", tensor_arg("h0")}, {"w_ih", tensor_arg(p[0])},
              {"w_hh", tensor_arg(p[1])}, {"b_ih", tensor_arg(p[2])}, {"b_hh", tensor_arg(p[3])}};
  gru.outputs = {{"h", {2, 4}}};
  out = run(gru, gin);
  ASSERT_EQ(out.size(), 1u);
  expect_near(out[0], kGruCellH, "gru h");
}

TEST(ImportRecurrent, SymbolicSequenceLengthAndPackedSequencesAreUnsupported) {
  Node op{"aten.lstm.input"};
  op.inputs = {{"x", {2, 5, 3}}, {"h0", {1, 2, 4}}, {"c0", {1, 2, 4}}};
  std::vector<std::vector<float>> in;
  const auto params = add_params(op, in, {{16, 3}, {16, 4}, {16}, {16}});
  op.args = rnn_args(tensors_arg({"h0", "c0"}), params, true, 1, false, true);
  op.outputs = {{"y", {2, 5, 4}}, {"hn", {1, 2, 4}}, {"cn", {1, 2, 4}}};
  const json s0 = {{"as_expr", {{"expr_str", "Symbol('s0', positive=True, integer=True)"}, {"hint", {{"as_int", 5}}}}}};
  op.metas["x"] = meta({2, 0, 3});
  op.metas["x"]["sizes"][1] = s0;
  op.metas["y"] = meta({2, 0, 4});
  op.metas["y"]["sizes"][1] = s0;
  op.ranges["s0"] = {{"min_val", 2}, {"max_val", 64}};
  auto ep = import_node(op);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(ep.status().message().find("[aten.lstm.input] LSTM over a symbolic sequence length: recurrent layers are unrolled over a static "
                                       "number of time steps (rnn.py:3)"),
            std::string::npos)
      << ep.status().message();

  Node packed{"aten.lstm.data"};
  packed.inputs = {{"x", {5, 3}}, {"sizes", {2}}};
  packed.args = {{"data", tensor_arg("x")}, {"batch_sizes", tensor_arg("sizes")}};
  packed.outputs = {{"y", {5, 4}}};
  ep = import_node(packed);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(ep.status().message().find("[aten.lstm.data] LSTM over packed sequences"), std::string::npos) << ep.status().message();
}

// Every interpolation (bilinear, nearest, bicubic) x padding (zeros, border, reflection) x
// align_corners, grid points inside and outside [-1, 1].
TEST(ImportRecurrent, GridSample2dEveryModePaddingAndAlignment) {
  for (std::int64_t mode = 0; mode < 3; ++mode) {
    for (std::int64_t pad = 0; pad < 3; ++pad) {
      for (int ac = 0; ac < 2; ++ac) {
        Node op{"aten.grid_sampler_2d.default"};
        op.inputs = {{"x", {1, 2, 3, 4}}, {"g", {1, 2, 3, 2}}};
        op.args = {{"input", tensor_arg("x")}, {"grid", tensor_arg("g")}, {"interpolation_mode", int_(mode)},
                   {"padding_mode", int_(pad)}, {"align_corners", bool_(ac == 1)}};
        op.outputs = {{"y", {1, 2, 2, 3}}};
        const auto out = run(op, {gen(24, 0.1), gen(12, 0.7, 1.6)});
        ASSERT_EQ(out.size(), 1u);
        const std::size_t k = static_cast<std::size_t>((mode * 3 + pad) * 2 + ac);
        expect_near(out[0], std::vector<float>(kGrid2d.begin() + static_cast<std::ptrdiff_t>(k * 12), kGrid2d.begin() + static_cast<std::ptrdiff_t>(k * 12 + 12)),
                    "mode " + std::to_string(mode) + " padding " + std::to_string(pad) + " align " + std::to_string(ac));
      }
    }
  }
}

// By hand: a 1x3 image [10, 20, 30] at x = -3, -1, 0, 1, 1.5, 3 (align_corners: ix = x + 1)
// and y = 0 (a height-1 image reflects to 0).
TEST(ImportRecurrent, GridSampleOutsidePointsByHand) {
  const std::vector<std::vector<float>> want{{0, 10, 20, 30, 15, 0}, {10, 10, 20, 30, 30, 30}, {30, 10, 20, 30, 25, 10}};
  for (std::int64_t pad = 0; pad < 3; ++pad) {
    Node op{"aten.grid_sampler.default"};
    op.inputs = {{"x", {1, 1, 1, 3}}, {"g", {1, 1, 6, 2}}};
    op.args = {{"input", tensor_arg("x")}, {"grid", tensor_arg("g")}, {"interpolation_mode", int_(0)},
               {"padding_mode", int_(pad)}, {"align_corners", bool_(true)}};
    op.outputs = {{"y", {1, 1, 1, 6}}};
    const auto out = run(op, {{10, 20, 30}, {-3, 0, -1, 0, 0, 0, 1, 0, 1.5f, 0, 3, 0}});
    ASSERT_EQ(out.size(), 1u);
    expect_near(out[0], want[static_cast<std::size_t>(pad)], "padding " + std::to_string(pad));
  }
}

TEST(ImportRecurrent, GridSample3dBilinearAndNearest) {
  for (std::int64_t mode = 0; mode < 2; ++mode) {
    for (std::int64_t pad = 0; pad < 3; ++pad) {
      for (int ac = 0; ac < 2; ++ac) {
        Node op{"aten.grid_sampler.default"};
        op.inputs = {{"x", {1, 1, 2, 3, 4}}, {"g", {1, 2, 2, 2, 3}}};
        op.args = {{"input", tensor_arg("x")}, {"grid", tensor_arg("g")}, {"interpolation_mode", int_(mode)},
                   {"padding_mode", int_(pad)}, {"align_corners", bool_(ac == 1)}};
        op.outputs = {{"y", {1, 1, 2, 2, 2}}};
        const auto out = run(op, {gen(24, 0.1), gen(24, 0.7, 1.5)});
        ASSERT_EQ(out.size(), 1u);
        const std::size_t k = static_cast<std::size_t>((mode * 3 + pad) * 2 + ac);
        expect_near(out[0], std::vector<float>(kGrid3d.begin() + static_cast<std::ptrdiff_t>(k * 8), kGrid3d.begin() + static_cast<std::ptrdiff_t>(k * 8 + 8)),
                    "mode " + std::to_string(mode) + " padding " + std::to_string(pad) + " align " + std::to_string(ac));
      }
    }
  }
}

TEST(ImportRecurrent, AffineGrid2dAnd3d) {
  for (int ac = 0; ac < 2; ++ac) {
    Node op{"aten.affine_grid_generator.default"};
    op.inputs = {{"t", {2, 2, 3}}};
    op.args = {{"theta", tensor_arg("t")}, {"size", ints({2, 1, 3, 4})}, {"align_corners", bool_(ac == 1)}};
    op.outputs = {{"y", {2, 3, 4, 2}}};
    const auto out = run(op, {gen(12, 0.4)});
    ASSERT_EQ(out.size(), 1u);
    expect_near(out[0], ac ? kAffine2dT : kAffine2dF, "align " + std::to_string(ac));
  }
  Node op{"aten.affine_grid_generator.default"};
  op.inputs = {{"t", {1, 3, 4}}};
  op.args = {{"theta", tensor_arg("t")}, {"size", ints({1, 1, 2, 3, 2})}, {"align_corners", bool_(false)}};
  op.outputs = {{"y", {1, 2, 3, 2, 3}}};
  const auto out = run(op, {gen(12, 0.4)});
  ASSERT_EQ(out.size(), 1u);
  expect_near(out[0], kAffine3d);
}

// The .default overloads (scales as arguments) and the .vec ones (scale_factors or sizes).
TEST(ImportRecurrent, UpsamplingLinearTrilinearNearestAndNearestExact) {
  Node lin{"aten.upsample_linear1d.default"};
  lin.inputs = {{"x", {1, 2, 5}}};
  lin.args = {{"self", tensor_arg("x")}, {"output_size", ints({8})}, {"align_corners", bool_(false)}, {"scales", float_(1.7)}};
  lin.outputs = {{"y", {1, 2, 8}}};
  expect_near(run(lin, {gen(10, 0.1)}).at(0), kLinear1dScale, "linear1d");

  Node tri{"aten.upsample_trilinear3d.vec"};
  tri.inputs = {{"x", {1, 1, 2, 3, 2}}};
  tri.args = {{"input", tensor_arg("x")}, {"output_size", ints({3, 4, 3})}, {"align_corners", bool_(true)}, {"scale_factors", none()}};
  tri.outputs = {{"y", {1, 1, 3, 4, 3}}};
  expect_near(run(tri, {gen(12, 0.1)}).at(0), kTrilinearAc, "trilinear");

  Node exact{"aten._upsample_nearest_exact1d.vec"};
  exact.inputs = {{"x", {1, 2, 5}}};
  exact.args = {{"input", tensor_arg("x")}, {"output_size", none()}, {"scale_factors", floats({1.7})}};
  exact.outputs = {{"y", {1, 2, 8}}};
  expect_near(run(exact, {gen(10, 0.1)}).at(0), kExact1d, "nearest-exact 1d");

  Node n3{"aten.upsample_nearest3d.vec"};
  n3.inputs = {{"x", {1, 1, 2, 3, 2}}};
  n3.args = {{"input", tensor_arg("x")}, {"output_size", ints({3, 5, 3})}, {"scale_factors", none()}};
  n3.outputs = {{"y", {1, 1, 3, 5, 3}}};
  expect_near(run(n3, {gen(12, 0.1)}).at(0), kNearest3d, "nearest 3d");

  Node n1{"aten.upsample_nearest1d.default"};
  n1.inputs = {{"x", {1, 2, 5}}};
  n1.args = {{"self", tensor_arg("x")}, {"output_size", ints({7})}};
  n1.outputs = {{"y", {1, 2, 7}}};
  expect_near(run(n1, {gen(10, 0.1)}).at(0), kNearest1d, "nearest 1d");
}

}  // namespace
}  // namespace kiln
