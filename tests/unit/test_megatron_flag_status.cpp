// Every argument of Megatron-LM's arguments.py has a status in Strata's flag table
// (training/config/megatron_arguments.h, megatron_flag_table.cpp): implemented (a field), accepted
// without effect, or refused by name. "Unknown flag" is left for flags that are not Megatron's.
// Also the list itself (parsed from the compiled-in TSV) and docs/megatron_flags.md, generated.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "generated_doc_check.h"
#include "training/config/config.h"
#include "training/config/megatron_arguments.h"
#include "training/config/megatron_flags_doc.h"

using namespace strata;

TEST_CASE("megatron flags: the compiled-in argument list is Megatron's, with its commit", "[megatron_flags]") {
  const auto& args = megatron_arguments();
  CHECK(args.size() > 800);
  CHECK(megatron_arguments_commit().size() > 40);
  const MegatronArgument* lr = find_megatron_argument("--lr");
  REQUIRE(lr != nullptr);
  CHECK(lr->dest == "lr");
  CHECK(lr->arity == config::FlagArity::One);
  const MegatronArgument* bf16 = find_megatron_argument("--bf16");
  REQUIRE(bf16 != nullptr);
  CHECK(bf16->arity == config::FlagArity::Switch);
  CHECK(find_megatron_argument("--not-a-megatron-flag") == nullptr);
  CHECK_THROWS_WITH(parse_megatron_arguments("flags\tdest\n--a\ta\n", nullptr, "x.tsv"),
                    Catch::Matchers::Contains("x.tsv:2") && Catch::Matchers::Contains("6 tab-separated"));
}

TEST_CASE("megatron flags: every Megatron argument has a status", "[megatron_flags]") {
  const config::MegatronFlags flags(StrataConfig::table().untyped());
  std::vector<std::string> missing;
  for (const MegatronArgument& a : megatron_arguments())
    for (const std::string& f : a.flags)
      if (!flags.find(f)) missing.push_back(f + " (" + a.group + ")");
  for (const std::string& m : missing) UNSCOPED_INFO(m);
  CHECK(missing.size() == 0);
}

TEST_CASE("megatron flags: docs/megatron_flags.md is generated from the list and the table", "[megatron_flags]") {
  test::check_generated_doc("docs/megatron_flags.md", megatron_flags_markdown());
  const MegatronFlagCounts c = megatron_flag_counts(false);
  CHECK(c.unknown == 0);
  CHECK(c.implemented + c.accepted + c.refused == static_cast<int>(megatron_arguments().size()));
}
