#include "kiln/export/dim.h"

#include "kiln/export/tensor.h"

namespace kiln {

struct Dim::Data {
  Kind kind = Kind::kStatic;
  std::string name;
  std::int64_t min = 1;
  std::int64_t max = kInf;
  std::shared_ptr<Dim> root;
  std::int64_t coefficient = 1;
  std::int64_t offset = 0;
  std::vector<std::string> specializations;
};

struct DimFactory {
  static Dim wrap(std::shared_ptr<Dim::Data> d) { return Dim(std::move(d)); }
};

namespace {
std::shared_ptr<Dim::Data> make(Dim::Kind kind, std::string name) {
  auto d = std::make_shared<Dim::Data>();
  d->kind = kind;
  d->name = std::move(name);
  return d;
}
}  // namespace

const Dim Dim::AUTO = DimFactory::wrap(make(Dim::Kind::kAuto, "AUTO"));
const Dim Dim::DYNAMIC = DimFactory::wrap(make(Dim::Kind::kDynamic, "DYNAMIC"));
const Dim Dim::STATIC = DimFactory::wrap(make(Dim::Kind::kStatic, "STATIC"));

Dim::Dim(std::string name, std::int64_t min, std::int64_t max) : data_(make(Kind::kNamed, std::move(name))) {
  if (min < 0 || min > max) {
    throw ExportError(StatusCode::kUsage, "Dim(\"" + data_->name + "\"): invalid range [" + std::to_string(min) + ", " +
                                              std::to_string(max) + "]");
  }
  data_->min = min;
  data_->max = max;
}

Dim& Dim::specialize_on(std::vector<std::string> predicates) {
  if (data_->kind != Kind::kNamed) {
    throw ExportError(StatusCode::kUsage, "specialize_on: only a named Dim can carry specializations");
  }
  data_->specializations = std::move(predicates);
  return *this;
}

Dim::Kind Dim::kind() const { return data_->kind; }
const std::string& Dim::name() const { return data_->name; }
std::int64_t Dim::min() const { return data_->min; }
std::int64_t Dim::max() const { return data_->max; }
const Dim* Dim::root() const { return data_->root.get(); }
std::int64_t Dim::coefficient() const { return data_->coefficient; }
std::int64_t Dim::offset() const { return data_->offset; }
const std::vector<std::string>& Dim::specializations() const { return data_->specializations; }
const void* Dim::id() const { return data_.get(); }

Dim operator*(std::int64_t k, const Dim& d) {
  if (d.kind() != Dim::Kind::kNamed && d.kind() != Dim::Kind::kDerived) {
    throw ExportError(StatusCode::kUsage, "derived dims need a named Dim: k * Dim(\"name\")");
  }
  if (k < 1) throw ExportError(StatusCode::kUsage, "derived dims must be increasing: coefficient " + std::to_string(k) + " < 1");
  auto data = make(Dim::Kind::kDerived, "");
  data->root = std::make_shared<Dim>(d.root() ? *d.root() : d);
  data->coefficient = k * d.coefficient();
  data->offset = k * d.offset();
  data->name = std::to_string(data->coefficient) + "*" + data->root->name() + (data->offset ? " + " + std::to_string(data->offset) : "");
  return DimFactory::wrap(data);
}

Dim operator+(const Dim& d, std::int64_t c) {
  if (d.kind() != Dim::Kind::kNamed && d.kind() != Dim::Kind::kDerived) {
    throw ExportError(StatusCode::kUsage, "derived dims need a named Dim: Dim(\"name\") + c");
  }
  auto data = make(Dim::Kind::kDerived, "");
  data->root = std::make_shared<Dim>(d.root() ? *d.root() : d);
  data->coefficient = d.coefficient();
  data->offset = d.offset() + c;
  data->name = (data->coefficient == 1 ? "" : std::to_string(data->coefficient) + "*") + data->root->name() +
               (data->offset >= 0 ? " + " + std::to_string(data->offset) : " - " + std::to_string(-data->offset));
  return DimFactory::wrap(data);
}

}  // namespace kiln
