// Branded ids: encoding, parsing, validation, ordering, and minting inside
// one process. (Minting across processes is in tests/multiproc/mint_test.cpp.)
#include "test_support.hpp"
#include "../../src/util.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace fairlane {
namespace {

using test::SegmentGuard;
using test::unique_segment_name;

std::optional<BrandedId> parse(std::string_view s, IdError* why) { return BrandedId::parse(s, why); }

IdError parse_error(std::string_view s) {
  IdError why = IdError::ok;
  auto id = BrandedId::parse(s, &why);
  EXPECT_FALSE(id.has_value()) << "'" << s << "' parsed but should not";
  return why;
}

// ---------------------------------------------------------------- the known vector

TEST(Ids, KnownVectorEncodes) {
  const BrandedId id = BrandedId::make("USR", 274557032793636864ULL);
  ASSERT_TRUE(id.valid());
  EXPECT_EQ(id.str(), "USR0KHTOWnGLuC");
  EXPECT_EQ(id.string(), "USR0KHTOWnGLuC");
  EXPECT_EQ(id.kind(), "USR");
  EXPECT_EQ(id.snowflake(), 274557032793636864ULL);
  const auto digits = encode_base62(274557032793636864ULL);
  EXPECT_EQ(std::string_view(digits.data(), digits.size()), "0KHTOWnGLuC");
}

// base62_words (the claim's group ids, made in registers) lays out the
// digits encode_base62 gives: digits 0-7 in the first word, 8-10 in the low
// three bytes of the second, its high byte 0.
TEST(Ids, Base62WordsAreTheDigitsEncodeGives) {
  std::vector<std::uint64_t> values{0, 1, 61, 62, 3843, 3844, 3845, 238327, 14776335, 274557032793636864ULL,
                                    kMaxSnowflake, kMaxSnowflake - 1};
  // Each power of 62 and the value below it: every count of leading zero
  // digits, from ten to none.
  std::uint64_t p = 1;
  for (int k = 1; k <= 10; ++k) {  // 62^10 < 2^63 - 1 < 62^11
    p *= 62;
    values.push_back(p - 1);
    values.push_back(p);
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) values.push_back(rng() & kMaxSnowflake);
  for (const std::uint64_t v : values) {
    std::uint64_t a = 0;
    std::uint32_t b = 0;
    detail::base62_words(v, a, b);
    char text[kDigits];
    std::memcpy(text, &a, 8);
    std::memcpy(text + 8, &b, 3);
    const auto want = encode_base62(v);
    ASSERT_EQ(std::string_view(text, kDigits), std::string_view(want.data(), want.size())) << v;
    ASSERT_EQ(b >> 24, 0U) << v;
  }
}

TEST(Ids, KnownVectorParsesBack) {
  IdError why = IdError::bad_digit;
  auto id = parse("USR0KHTOWnGLuC", &why);
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(why, IdError::ok);
  EXPECT_EQ(id->snowflake(), 274557032793636864ULL);
  EXPECT_EQ(id->kind(), "USR");
  EXPECT_EQ(id->str(), "USR0KHTOWnGLuC");
  EXPECT_EQ(*id, BrandedId::make("USR", 274557032793636864ULL));
}

TEST(Ids, ParseWithoutReasonPointer) {
  EXPECT_TRUE(BrandedId::parse("USR0KHTOWnGLuC").has_value());
  EXPECT_FALSE(BrandedId::parse("USR0KHTOWnGLu").has_value());
}

TEST(Ids, EmptyIdIsInvalid) {
  BrandedId id;
  EXPECT_FALSE(id.valid());
  EXPECT_TRUE(id.str().empty());
  EXPECT_TRUE(id.kind().empty());
}

// ---------------------------------------------------------------- bounds

TEST(Ids, ZeroAndMaxSnowflakeRoundTrip) {
  const BrandedId zero = BrandedId::make("JOB", 0);
  ASSERT_TRUE(zero.valid());
  EXPECT_EQ(zero.str(), "JOB00000000000");
  EXPECT_EQ(zero.snowflake(), 0U);

  const BrandedId max = BrandedId::make("JOB", kMaxSnowflake);
  ASSERT_TRUE(max.valid());
  EXPECT_EQ(max.str(), "JOBAzL8n0Y58m7");  // 2^63 - 1 in base62
  auto back = BrandedId::parse("JOBAzL8n0Y58m7");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->snowflake(), kMaxSnowflake);
}

TEST(Ids, OverflowIsRejected) {
  // 62^11 > 2^64: the parser must catch overflow past 2^63 - 1, past 2^64,
  // and not be fooled by a value that wraps around in 64 bits.
  EXPECT_EQ(parse_error("USRzzzzzzzzzzz"), IdError::overflow);
  EXPECT_EQ(parse_error("USRAzL8n0Y58m8"), IdError::overflow);  // exactly 2^63
  EXPECT_EQ(parse_error("USRGU0iBVp7iAC"), IdError::overflow);  // 2^63 + 2^62
  EXPECT_EQ(parse_error("USRLygHa16AHYF"), IdError::overflow);  // 2^64 - 1
  EXPECT_EQ(parse_error("USRLygHa16AHYL"), IdError::overflow);  // 2^64 + 5: wraps to 5 if unchecked
}

TEST(Ids, MakeRejectsOverflowAndBadKind) {
  EXPECT_FALSE(BrandedId::make("USR", kMaxSnowflake + 1).valid());
  EXPECT_FALSE(BrandedId::make("USR", ~0ULL).valid());
  EXPECT_FALSE(BrandedId::make("usr", 1).valid());
  EXPECT_FALSE(BrandedId::make("US", 1).valid());
  EXPECT_FALSE(BrandedId::make("USRX", 1).valid());
  EXPECT_FALSE(BrandedId::make("U1R", 1).valid());
  EXPECT_FALSE(BrandedId::make("", 1).valid());
}

// ---------------------------------------------------------------- malformed text

TEST(Ids, WrongLength) {
  EXPECT_EQ(parse_error(""), IdError::wrong_length);
  EXPECT_EQ(parse_error("USR"), IdError::wrong_length);
  EXPECT_EQ(parse_error("USR0KHTOWnGLu"), IdError::wrong_length);    // 13
  EXPECT_EQ(parse_error("USR0KHTOWnGLuCC"), IdError::wrong_length);  // 15
  EXPECT_EQ(parse_error(" USR0KHTOWnGLuC"), IdError::wrong_length);
  EXPECT_EQ(parse_error("USR0KHTOWnGLuC\n"), IdError::wrong_length);
}

TEST(Ids, BadKind) {
  EXPECT_EQ(parse_error("usr0KHTOWnGLuC"), IdError::bad_kind);
  EXPECT_EQ(parse_error("Usr0KHTOWnGLuC"), IdError::bad_kind);
  EXPECT_EQ(parse_error("US10KHTOWnGLuC"), IdError::bad_kind);
  EXPECT_EQ(parse_error("1SR0KHTOWnGLuC"), IdError::bad_kind);
  EXPECT_EQ(parse_error("U-R0KHTOWnGLuC"), IdError::bad_kind);
  EXPECT_EQ(parse_error("@SR0KHTOWnGLuC"), IdError::bad_kind);  // '@' is just below 'A'
  EXPECT_EQ(parse_error("[SR0KHTOWnGLuC"), IdError::bad_kind);  // '[' is just above 'Z'
}

TEST(Ids, BadDigit) {
  EXPECT_EQ(parse_error("USR0KHTOWnGLu-"), IdError::bad_digit);
  EXPECT_EQ(parse_error("USR-KHTOWnGLuC"), IdError::bad_digit);
  EXPECT_EQ(parse_error("USR0KHTO nGLuC"), IdError::bad_digit);
  EXPECT_EQ(parse_error("USR0KHTO_nGLuC"), IdError::bad_digit);
  EXPECT_EQ(parse_error("USR0KHTO:nGLuC"), IdError::bad_digit);  // between '9' and 'A'
  EXPECT_EQ(parse_error("USR0KHTO{nGLuC"), IdError::bad_digit);  // just above 'z'
  EXPECT_EQ(parse_error("USR0KHTO`nGLuC"), IdError::bad_digit);  // between 'Z' and 'a'
  std::string with_nul = "USR0KHTOWnGLuC";
  with_nul[7] = '\0';
  EXPECT_EQ(parse_error(with_nul), IdError::bad_digit);
  std::string high = "USR0KHTOWnGLuC";
  high[9] = static_cast<char>(0xC3);
  EXPECT_EQ(parse_error(high), IdError::bad_digit);
}

TEST(Ids, ErrorNamesAreDistinct) {
  std::set<std::string_view> names;
  for (IdError e : {IdError::ok, IdError::wrong_length, IdError::bad_kind, IdError::bad_digit, IdError::overflow}) {
    EXPECT_FALSE(to_string(e).empty());
    names.insert(to_string(e));
  }
  EXPECT_EQ(names.size(), 5U);
}

TEST(Ids, ValidKind) {
  EXPECT_TRUE(valid_kind("JOB"));
  EXPECT_TRUE(valid_kind("AAA"));
  EXPECT_TRUE(valid_kind("ZZZ"));
  EXPECT_FALSE(valid_kind("job"));
  EXPECT_FALSE(valid_kind("JO"));
  EXPECT_FALSE(valid_kind("JOBS"));
  EXPECT_FALSE(valid_kind("J0B"));
  EXPECT_FALSE(valid_kind(""));
}

TEST(Ids, SnowflakeFields) {
  const std::uint64_t s = snowflake_of(123456789, 5, 7);
  EXPECT_EQ(snowflake_ms(s), 123456789U);
  EXPECT_EQ((s >> 12) & 0x3FF, 5U);
  EXPECT_EQ(s & 0xFFF, 7U);
  // Out-of-range node and seq are masked, never spill into neighbouring fields.
  EXPECT_EQ(snowflake_of(1, 0x7FF, 0), snowflake_of(1, 0x3FF, 0));
  EXPECT_EQ(snowflake_of(1, 0, 0x1FFF), snowflake_of(1, 0, 0xFFF));
}

TEST(Ids, WellFormedChecksTheBytes) {
  EXPECT_TRUE(BrandedId::make("USR", 274557032793636864ULL).well_formed());
  EXPECT_TRUE(BrandedId::parse("USRAzL8n0Y58m7")->well_formed());
  EXPECT_FALSE(BrandedId{}.well_formed());
  // Bytes copied in from elsewhere (a corrupt record): parse would refuse them.
  auto forge = [](const char (&text)[kIdLength + 1]) {
    std::array<char, sizeof(BrandedId)> bytes{};  // the text, then zero padding
    std::memcpy(bytes.data(), text, kIdLength);
    return std::bit_cast<BrandedId>(bytes);
  };
  EXPECT_FALSE(forge("usr0KHTOWnGLuC").well_formed());
  EXPECT_FALSE(forge("USR0KHTOWnGLu-").well_formed());
  EXPECT_FALSE(forge("USRzzzzzzzzzzz").well_formed());
  EXPECT_FALSE(forge("USRLygHa16AHYL").well_formed());  // 2^64 + 5
  EXPECT_TRUE(forge("USR0KHTOWnGLuC").well_formed());
}

// ---------------------------------------------------------------- order

TEST(Ids, ByteOrderIsNumericOrder) {
  std::mt19937_64 rng(20240101);
  auto random_snowflake = [&]() -> std::uint64_t {
    // Mix full-range values with near neighbours and small values so short
    // and long encodings (leading '0' padding) are both exercised.
    switch (rng() % 4) {
      case 0: return rng() & kMaxSnowflake;
      case 1: return rng() % 1000;
      case 2: return (rng() & kMaxSnowflake) >> (rng() % 63);
      default: return snowflake_of(rng() % (1ULL << 41), static_cast<std::uint32_t>(rng() % 1024), static_cast<std::uint32_t>(rng() % 4096));
    }
  };
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t a = random_snowflake();
    const std::uint64_t b = (i % 3 == 0) ? a + (rng() % 3) : random_snowflake();
    if (b > kMaxSnowflake) continue;
    const BrandedId ia = BrandedId::make("JOB", a);
    const BrandedId ib = BrandedId::make("JOB", b);
    ASSERT_TRUE(ia.valid() && ib.valid());
    const int bytes = std::memcmp(ia.str().data(), ib.str().data(), kIdLength);
    const int numeric = a < b ? -1 : (a > b ? 1 : 0);
    ASSERT_EQ(bytes < 0 ? -1 : (bytes > 0 ? 1 : 0), numeric) << ia.str() << " vs " << ib.str();
    ASSERT_EQ(ia < ib, a < b);
    ASSERT_EQ(ia == ib, a == b);
    ASSERT_EQ(ia.snowflake(), a);
    auto back = BrandedId::parse(ia.str());
    ASSERT_TRUE(back.has_value());
    ASSERT_EQ(*back, ia);
  }
}

// ---------------------------------------------------------------- minting in one process

// The small queue the mint tests mint from (they enqueue nothing).
QueueOptions mint_queue_options(const char* kind = "JOB") {
  QueueOptions o;
  o.jobs = 16;
  o.lanes = 4;
  o.job_kind = kind;
  return o;
}

TEST(IdMint, UsesJobKindAndWallClock) {
  SegmentGuard guard(unique_segment_name());
  const QueueOptions opts = mint_queue_options("TSK");
  FAIRLANE_CREATE_OR_FAIL(q, guard.name(), opts);

  const auto wall_ms = [] {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count());
  };
  const std::uint64_t before = wall_ms();
  const BrandedId a = q.mint();
  const BrandedId b = q.mint("GRP");
  ASSERT_TRUE(a.valid());
  ASSERT_TRUE(b.valid());
  EXPECT_EQ(a.kind(), "TSK");
  EXPECT_EQ(b.kind(), "GRP");
  EXPECT_LT(a.snowflake(), b.snowflake()) << "one counter for every namespace";
  EXPECT_FALSE(q.mint("grp").valid());
  EXPECT_FALSE(q.mint("GRPX").valid());

  // The timestamp part is milliseconds since 2024-01-01 on the wall clock
  // (wire compatibility with EchoMQ). Allow a day of slack: this catches a
  // monotonic or unshifted clock, not a slow machine.
  const std::uint64_t minted_ms = snowflake_ms(a.snowflake()) + kEpochMs;
  constexpr std::uint64_t kDay = 24ULL * 3600 * 1000;
  EXPECT_GT(minted_ms + kDay, before);
  EXPECT_LT(minted_ms, before + kDay);
}

// A job imported with an id from a day ahead (restored from a host whose
// clock ran ahead) puts the logical clock there; mint() goes on from it at
// once, above it. It waited for the wall clock to catch up, in every
// process: a day here, for good with the largest id (found by a tester).
// With the largest id imported, ids are spent: the empty id, at once.
// Each mint runs on a thread the test waits for with a bound far above a
// mint's cost (a liveness bound, not a speed check).
TEST(IdMint, AnIdImportedFromAheadOfTheClockDoesNotStopTheMint) {
  SegmentGuard guard(unique_segment_name());
  FAIRLANE_CREATE_OR_FAIL(q, guard.name(), mint_queue_options());
  const auto mint_within = [&q](BrandedId& out) {
    std::promise<BrandedId> p;
    std::future<BrandedId> f = p.get_future();
    std::thread t([&q, p = std::move(p)]() mutable { p.set_value(q.mint()); });
    const bool ready = f.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    if (!ready) {
      t.detach();  // stuck in mint: the test has failed; the process ends with it
      return false;
    }
    t.join();
    out = f.get();
    return true;
  };
  const std::uint64_t day = 24ULL * 3600 * 1000;
  JobInfo ahead;
  ahead.id = BrandedId::make("JOB", snowflake_of(snowflake_ms(q.mint().snowflake()) + day, 7, 0));
  ahead.group = BrandedId::make("GRP", 1);
  ahead.state = JobState::pending;
  ASSERT_EQ(q.import_job(ahead, "x"), EnqueueStatus::enqueued);
  BrandedId next;
  ASSERT_TRUE(mint_within(next)) << "mint() waited for the clock to reach an imported id";
  EXPECT_GT(next, ahead.id);
  EXPECT_EQ(q.enqueue(BrandedId::make("GRP", 1), next, "y"), EnqueueStatus::enqueued);

  JobInfo last = ahead;
  last.id = BrandedId::make("JOB", kMaxSnowflake);
  ASSERT_EQ(q.import_job(last, "z"), EnqueueStatus::enqueued);
  ASSERT_TRUE(mint_within(next)) << "mint() waited after the largest id was imported";
  EXPECT_FALSE(next.valid()) << "ids are spent: " << next.str();
}

// The mint writes an id's text from its thread's last id's digits where it
// can (the first seven), working out only the last four: over some 200,000
// ids (the first seven digits change every 62^4 snowflakes, about 3.5 ms of
// them; at most 4,096 ids fit in one) every text is a well-formed id of the
// kind asked, and read back it is the next snowflake of one thread's
// sequence: one more than the last within a millisecond, never less. On a
// thread of its own, so that its first mint has no memo to start from.
TEST(IdMint, EveryMintedTextSpellsTheNextSnowflake) {
  SegmentGuard guard(unique_segment_name());
  const QueueOptions opts = mint_queue_options("TSK");
  FAIRLANE_CREATE_OR_FAIL(q, guard.name(), opts);
  std::uint64_t crossings = 0;
  std::thread([&] {
    std::uint64_t last = 0;
    constexpr std::uint64_t kLow = 62ULL * 62 * 62 * 62;
    for (int i = 0; i < 200000; ++i) {
      const bool other_kind = i % 7 == 3;
      const BrandedId id = other_kind ? q.mint("GRP") : q.mint();
      ASSERT_TRUE(id.valid() && id.well_formed()) << i;
      ASSERT_EQ(id.kind(), other_kind ? "GRP" : "TSK") << i;
      const std::uint64_t sf = id.snowflake();
      ASSERT_GT(sf, last) << i << ": " << id.str();
      if (last != 0 && snowflake_ms(sf) == snowflake_ms(last)) {
        ASSERT_EQ(sf, last + 1) << i << ": " << id.str();
      }
      if (last != 0 && sf / kLow != last / kLow) ++crossings;
      last = sf;
    }
  }).join();
  EXPECT_GT(crossings, 0U) << "the first seven digits never changed: the test did not cover both ways of writing them";
}

TEST(IdMint, StrictlyIncreasingAcrossThreads) {
  SegmentGuard guard(unique_segment_name());
  const QueueOptions opts = mint_queue_options();
  FAIRLANE_CREATE_OR_FAIL(q, guard.name(), opts);

  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;  // far more than 4096 per ms: exercises the seq carry
  std::vector<std::vector<BrandedId>> minted(kThreads);
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        auto& out = minted[t];
        out.reserve(kPerThread);
        for (int i = 0; i < kPerThread; ++i) out.push_back(q.mint());
      });
    }
    for (auto& th : threads) th.join();
  }
  std::vector<BrandedId> all;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      ASSERT_TRUE(minted[t][i].valid());
      ASSERT_EQ(minted[t][i].kind(), "JOB");
      if (i > 0) { ASSERT_LT(minted[t][i - 1], minted[t][i]) << "thread " << t << " index " << i; }
    }
    all.insert(all.end(), minted[t].begin(), minted[t].end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "duplicate id minted";

  // A later mint is greater than everything minted before.
  const BrandedId later = q.mint();
  EXPECT_LT(all.back(), later);
}

TEST(IdMint, SharedAcrossAttachments) {
  // Two Queue objects on one segment share the mint word.
  SegmentGuard guard(unique_segment_name());
  const QueueOptions opts = mint_queue_options();
  FAIRLANE_CREATE_OR_FAIL(q1, guard.name(), opts);
  auto q2r = Queue::open(guard.name());
  ASSERT_TRUE(q2r.ok()) << test::describe(q2r.error());
  Queue& q2 = q2r.value();
  BrandedId last;
  for (int i = 0; i < 10000; ++i) {
    const BrandedId next = (i % 2 == 0) ? q1.mint() : q2.mint();
    if (last.valid()) { ASSERT_LT(last, next) << "at " << i; }
    last = next;
  }
}

}  // namespace
}  // namespace fairlane
