// The config table mechanism (core/config_table.h) on a small test struct that has every field
// type: strict YAML decoding, overrides of every type, null handling, validators, "did you mean",
// YAML round trip, Python-style value printing and Megatron's argument-table layout.
#include <catch2/catch.hpp>

#include "core/config_table.h"

using namespace strata::config;

namespace {
enum class Color { Red, Green };
constexpr EnumName<Color> kColorNames[] = {{Color::Red, "red"}, {Color::Green, "Green"}};

struct Shape {
  int64_t count = 3;
  double scale = 0.5;
  bool enabled = true;
  std::string label = "abc";
  Color color = Color::Red;
  std::optional<int64_t> limit;
  std::optional<double> ratio;
  std::optional<std::string> path;
  std::optional<Color> tint;
};
struct Lists {
  std::vector<int64_t> ids = {1, 2};
  std::vector<double> weights;
  std::vector<std::string> names = {"x"};
};
struct Root {
  Shape shape;
  Lists lists;
};

ConfigTable<Root> make_table() {
  SectionFields<Shape> s;
  s.add("count", &Shape::count, "How many.").check(positive());
  s.add("scale", &Shape::scale, "Scale factor.").check(in_range(0, true, 1, false));
  s.add("enabled", &Shape::enabled, "On or off.");
  s.add("label", &Shape::label, "A label.");
  s.add_enum("color", &Shape::color, kColorNames, "A color.");
  s.add("limit", &Shape::limit, "Optional limit.").check(non_negative());
  s.add("ratio", &Shape::ratio, "Optional ratio.");
  s.add("path", &Shape::path, "Optional path.");
  s.add_enum("tint", &Shape::tint, kColorNames, "Optional tint.");
  SectionFields<Lists> l;
  l.add("ids", &Lists::ids, "Ids.").check(positive());
  l.add("weights", &Lists::weights, "Weights.");
  l.add("names", &Lists::names, "Names.");
  ConfigTable<Root> t;
  t.add_section("shape", &Root::shape, "A shape.", std::move(s));
  t.add_section("lists", &Root::lists, "Some lists.", std::move(l));
  return t;
}

const ConfigTable<Root>& table() {
  static const ConfigTable<Root> t = make_table();
  return t;
}

Root decode(const std::string& yaml) {
  Root r;
  table().decode_yaml_text(yaml, r, "test.yaml");
  return r;
}

// Runs f, requires a ConfigError whose message contains `field` (and `extra` if given).
template <typename F>
void require_config_error(F&& f, const std::string& field, const std::string& extra = "") {
  try {
    f();
    FAIL("no ConfigError; expected one naming " << field);
  } catch (const ConfigError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(field) != std::string::npos);
    if (!extra.empty()) CHECK(std::string(e.what()).find(extra) != std::string::npos);
  }
}
}  // namespace

TEST_CASE("config table: defaults come from member initializers", "[config]") {
  const FieldSpec* f = table().find("shape", "count");
  REQUIRE(f);
  CHECK(std::get<int64_t>(f->default_value) == 3);
  CHECK(f->type_text() == "int64");
  CHECK(table().find("shape", "limit")->type_text() == "int64 or null");
  CHECK(table().find("shape", "color")->type_text() == "enum {red, Green}");
  CHECK(std::holds_alternative<std::monostate>(table().find("shape", "tint")->default_value));
  CHECK(table().find("shape", "nope") == nullptr);
}

TEST_CASE("config table: YAML decoding of every type", "[config]") {
  Root r = decode(
      "shape:\n  count: 7\n  scale: 0.25\n  enabled: false\n  label: hello world\n  color: Green\n"
      "  limit: 9\n  ratio: 1e-3\n  path: /tmp/x\n  tint: red\n"
      "lists:\n  ids: [4, 5, 6]\n  weights: [0.5, 1]\n  names: [a, 'b c']\n");
  CHECK(r.shape.count == 7);
  CHECK(r.shape.scale == 0.25);
  CHECK(!r.shape.enabled);
  CHECK(r.shape.label == "hello world");
  CHECK(r.shape.color == Color::Green);
  CHECK(r.shape.limit == 9);
  CHECK(r.shape.ratio == 1e-3);
  CHECK(r.shape.path == "/tmp/x");
  CHECK(r.shape.tint == Color::Red);
  CHECK(r.lists.ids == std::vector<int64_t>{4, 5, 6});
  CHECK(r.lists.weights == std::vector<double>{0.5, 1.0});
  CHECK(r.lists.names == std::vector<std::string>{"a", "b c"});

  Root e = decode("");  // an empty file keeps every default
  CHECK(e.shape.count == 3);
  Root n = decode("shape:\n  limit: null\n  path: ~\nlists:\n");
  CHECK(!n.shape.limit);
  CHECK(!n.shape.path);
  Root one = decode("lists:\n  names: solo\n  ids: 8\n");  // a single value is a one-element list
  CHECK(one.lists.names == std::vector<std::string>{"solo"});
  CHECK(one.lists.ids == std::vector<int64_t>{8});
}

TEST_CASE("config table: overrides of every type are parsed as YAML", "[config]") {
  Root r;
  const auto& t = table();
  t.apply_override("shape.count=12", r);
  t.apply_override("shape.scale=0.125", r);
  t.apply_override("shape.enabled=false", r);
  t.apply_override("shape.label=cuda:1", r);
  t.apply_override("shape.color=Green", r);
  t.apply_override("shape.limit=5", r);
  t.apply_override("shape.ratio=2.5e-1", r);
  t.apply_override("shape.path=/a/b", r);
  t.apply_override("shape.tint=Green", r);
  t.apply_override("lists.ids=[7,8]", r);
  t.apply_override("lists.weights=[0.1, 0.9]", r);
  t.apply_override("lists.names=[a:10,b:20]", r);
  CHECK(r.shape.count == 12);
  CHECK(r.shape.scale == 0.125);
  CHECK(!r.shape.enabled);
  CHECK(r.shape.label == "cuda:1");
  CHECK(r.shape.color == Color::Green);
  CHECK(r.shape.limit == 5);
  CHECK(r.shape.ratio == 0.25);
  CHECK(r.shape.path == "/a/b");
  CHECK(r.shape.tint == Color::Green);
  CHECK(r.lists.ids == std::vector<int64_t>{7, 8});
  CHECK(r.lists.weights == std::vector<double>{0.1, 0.9});
  CHECK(r.lists.names == std::vector<std::string>{"a:10", "b:20"});
  t.apply_override("shape.limit=null", r);
  t.apply_override("shape.path=", r);  // an empty value is null
  t.apply_override("lists.names=[]", r);
  CHECK(!r.shape.limit);
  CHECK(!r.shape.path);
  CHECK(r.lists.names.empty());
}

TEST_CASE("config table: wrong types name the field and the expected type", "[config]") {
  require_config_error([] { decode("shape:\n  count: 1.5\n"); }, "shape.count", "expected int64");
  require_config_error([] { decode("shape:\n  count: \"4\"\n"); }, "shape.count", "quoted string");
  require_config_error([] { decode("shape:\n  count: [1]\n"); }, "shape.count", "got a list");
  require_config_error([] { decode("shape:\n  count: null\n"); }, "shape.count", "null is not allowed");
  require_config_error([] { decode("shape:\n  scale: abc\n"); }, "shape.scale", "expected double");
  require_config_error([] { decode("shape:\n  enabled: yes\n"); }, "shape.enabled", "expected bool");
  require_config_error([] { decode("shape:\n  enabled: 1\n"); }, "shape.enabled", "expected bool");
  require_config_error([] { decode("shape:\n  label: {a: 1}\n"); }, "shape.label", "got a map");
  require_config_error([] { decode("shape:\n  color: blue\n"); }, "shape.color", "not one of red, Green");
  require_config_error([] { decode("lists:\n  ids: [1, x]\n"); }, "lists.ids", "list of int64");
  require_config_error([] { decode("lists:\n  weights: [[1]]\n"); }, "lists.weights", "list of double");
  require_config_error([] { decode("shape:\n  count: 1\n  count: 2\n"); }, "shape.count", "twice");
  require_config_error([] { decode("shape: 3\n"); }, "shape.*", "expected a map");
  require_config_error([] { decode("- a\n- b\n"); }, "(top level)");
  require_config_error([] { decode("shape:\n  count: [1,\n"); }, "(yaml)", "line");
  // The file and line are in the message.
  require_config_error([] { decode("lists:\n  ids: [1]\nshape:\n  count: x\n"); }, "shape.count", "test.yaml:4");
  Root r;
  require_config_error([&] { table().apply_override("shape.count=abc", r); }, "shape.count",
                       "override 'shape.count=abc'");
  require_config_error([&] { table().apply_override("shape.count", r); }, "shape.count", "section.field=value");
  require_config_error([&] { table().apply_override("count=3", r); }, "count", "section.field=value");
  require_config_error([&] { table().apply_override("a.b.c=3", r); }, "a.b.c", "section.field=value");
}

TEST_CASE("config table: unknown keys suggest the closest name", "[config]") {
  require_config_error([] { decode("shape:\n  cont: 3\n"); }, "shape.cont", "did you mean 'shape.count'?");
  require_config_error([] { decode("shap:\n  count: 3\n"); }, "shap.count", "did you mean 'shape'?");
  require_config_error([] { decode("shape:\n  Count: 3\n"); }, "shape.Count", "did you mean 'shape.count'?");
  // A name from another section points there.
  require_config_error([] { decode("shape:\n  ids: [1]\n"); }, "shape.ids", "did you mean 'lists.ids'?");
  // Megatron's dashed flag spelling maps to the field.
  Root r;
  require_config_error([&] { table().apply_override("lists.we-ights=[1]", r); }, "lists.we-ights",
                       "did you mean 'lists.weights'?");
  require_config_error([&] { table().apply_override("shape.zzzzzzzz=1", r); }, "shape.zzzzzzzz", "unknown key");
  require_config_error([] { decode("shape:\n  color: green\n"); }, "shape.color", "did you mean 'Green'?");
}

TEST_CASE("config table: validators run in check_fields and skip null", "[config]") {
  Root r;
  table().check_fields(r);
  r.shape.count = 0;
  require_config_error([&] { table().check_fields(r); }, "shape.count", "must be > 0, got 0");
  r.shape.count = 1;
  r.shape.scale = 1.0;
  require_config_error([&] { table().check_fields(r); }, "shape.scale", "must be in [0, 1), got 1.0");
  r.shape.scale = 0.0;
  r.shape.limit = -1;
  require_config_error([&] { table().check_fields(r); }, "shape.limit", ">= 0");
  r.shape.limit.reset();
  r.lists.ids = {1, -2};
  require_config_error([&] { table().check_fields(r); }, "lists.ids", "every element");
}

TEST_CASE("config table: to_yaml round-trips every value", "[config]") {
  Root r;
  r.shape.count = -42;
  r.shape.scale = 0.1 + 0.2;  // needs all 17 digits
  r.shape.label = "true";     // would read back as a bool unless quoted
  r.shape.color = Color::Green;
  r.shape.ratio = 1e-300;
  r.shape.path = "";
  r.lists.weights = {1e20, -0.0, 3.0};
  r.lists.names = {"null", "a b", "x:y", "123", "-dash", "q\"uote"};
  std::string y = table().to_yaml(r);
  Root back = decode(y);
  CHECK(table().to_yaml(back) == y);
  CHECK(back.shape.scale == r.shape.scale);
  CHECK(back.shape.ratio == r.shape.ratio);
  CHECK(back.shape.path == std::string());
  CHECK(back.lists.names == r.lists.names);
  CHECK(back.lists.weights == r.lists.weights);
  CHECK(y.find("  limit: null\n") != std::string::npos);
  CHECK(y.find("  label: \"true\"\n") != std::string::npos);
}

TEST_CASE("config table: Python-style values and number formatting", "[config]") {
  CHECK(python_repr(Value()) == "None");
  CHECK(python_repr(Value(true)) == "True");
  CHECK(python_repr(Value(int64_t{-3})) == "-3");
  CHECK(python_repr(Value(1.0)) == "1.0");
  CHECK(python_repr(Value(0.02)) == "0.02");
  CHECK(python_repr(Value(1e-5)) == "1e-05");
  CHECK(python_repr(Value(0.0001)) == "0.0001");
  CHECK(python_repr(Value(3e-4)) == "0.0003");
  CHECK(python_repr(Value(1e16)) == "1e+16");
  CHECK(python_repr(Value(123456789.0)) == "123456789.0");
  CHECK(python_repr(Value(0.1 + 0.2)) == "0.30000000000000004");
  CHECK(python_repr(Value(-2.5e-8)) == "-2.5e-08");
  CHECK(python_repr(Value(std::vector<std::string>{"a", "it's"})) == "['a', \"it's\"]");
  CHECK(python_repr(Value(std::vector<double>{0.5, 2.0})) == "[0.5, 2.0]");
  CHECK(format_double(1e-5) == "1.0e-05");
  CHECK(format_double(2.0) == "2.0");
  CHECK(format_double(1e16) == "1.0e+16");
  CHECK(edit_distance("kitten", "sitting") == 3);
  // Bounded: the exact distance up to the bound, bound + 1 beyond it (hand-computed cases).
  CHECK(edit_distance_within("kitten", "sitting", 3) == 3);
  CHECK(edit_distance_within("kitten", "sitting", 2) == 3);
  CHECK(edit_distance_within("kitten", "sitting", 0) == 1);
  CHECK(edit_distance_within("abc", "abc", 0) == 0);
  CHECK(edit_distance_within("", "abcd", 10) == 4);
  CHECK(edit_distance_within("abcdefgh", "hgfedcba", 4) == 5);  // 8 apart: stops early
  CHECK(edit_distance("abcdefgh", "hgfedcba") == 8);
  CHECK(closest_match("num_layer", {"num_layers", "hidden_size"}) == "num_layers");
  CHECK(closest_match("completely_different", {"num_layers"}).empty());
}

TEST_CASE("config table: Megatron argument table layout", "[config]") {
  Root r;
  r.shape.limit = 4;
  std::string t = table().argument_table(r, {{"derived_size", "8"}});
  std::string head = "------------------------ arguments ------------------------\n";
  std::string tail = "-------------------- end of arguments ---------------------\n";
  REQUIRE(t.substr(0, head.size()) == head);
  REQUIRE(t.substr(t.size() - tail.size()) == tail);
  // "  name " + '.' * (48 - len(name)) + " " + value, sorted case-insensitively.
  CHECK(t.find("  count " + std::string(43, '.') + " 3\n") != std::string::npos);
  CHECK(t.find("  color " + std::string(43, '.') + " red\n") != std::string::npos);
  CHECK(t.find("  tint " + std::string(44, '.') + " None\n") != std::string::npos);
  CHECK(t.find("  names " + std::string(43, '.') + " ['x']\n") != std::string::npos);
  CHECK(t.find("  derived_size " + std::string(36, '.') + " 8\n") != std::string::npos);
  CHECK(t.find("  color") < t.find("  count"));
  CHECK(t.find("  count") < t.find("  derived_size"));
  CHECK(t.find("  weights") > t.find("  tint"));
}

TEST_CASE("config table: help and markdown list every field", "[config]") {
  std::string help = table().help_text(), md = table().markdown();
  for (const auto& s : table().sections())
    for (const auto& f : s.fields) {
      INFO(f.path());
      CHECK(help.find(f.path() + " (" + f.type_text()) != std::string::npos);
      CHECK(help.find(f.doc) != std::string::npos);
      CHECK(md.find("| `" + f.path() + "` |") != std::string::npos);
    }
  CHECK(help.find("shape.count (int64, default 3, > 0)") != std::string::npos);
  CHECK(md.find("enum {red, Green}") != std::string::npos);
}
