#include "corral/capture.hpp"

#include <openssl/evp.h>

#include <random>

#include "supervisor_harness.hpp"

using namespace corral;

namespace {

// Feed `text` in the given chunk sizes (the last chunk takes the rest),
// collect every returned byte and the finish() tail.
std::string mask_in_chunks(SecretMasker& m, std::string_view text, const std::vector<std::size_t>& sizes) {
  std::string out;
  std::size_t pos = 0;
  for (std::size_t size : sizes) {
    if (pos >= text.size()) break;
    out += m.feed(text.substr(pos, size));
    pos += std::min(size, text.size() - pos);
  }
  if (pos < text.size()) out += m.feed(text.substr(pos));
  return out + m.finish();
}

std::string mask_whole(const std::vector<std::string>& secrets, std::string_view text) {
  SecretMasker m(secrets);
  return mask_in_chunks(m, text, {});
}

// Reference semantics, no streaming, no cleverness: at each position the
// longest secret that matches there; occurrences overlapping the previous
// mask extend it, others start a new "***".
std::string reference_mask(const std::vector<std::string>& secrets, std::string_view text) {
  std::string out;
  std::size_t cursor = 0;
  for (std::size_t p = 0; p < text.size(); ++p) {
    std::size_t len = 0;
    for (const auto& s : secrets)
      if (!s.empty() && text.substr(p, s.size()) == s) len = std::max(len, s.size());
    if (len == 0) continue;
    if (p >= cursor) {
      out.append(text.substr(cursor, p - cursor));
      out += "***";
    }
    cursor = std::max(cursor, p + len);
  }
  if (cursor < text.size()) out.append(text.substr(cursor));
  return out;
}

std::string evp_oneshot_hex(std::string_view data) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  cr_assert_eq(EVP_Digest(data.data(), data.size(), d, &len, EVP_sha256(), nullptr), 1);
  std::string hex;
  char buf[3];
  for (unsigned int i = 0; i < len; ++i) {
    snprintf(buf, sizeof buf, "%02x", d[i]);
    hex += buf;
  }
  return hex;
}

void expect_str(const std::string& got, const std::string& want, const char* what) {
  cr_assert(got == want, "%s: got '%s', want '%s'", what, got.c_str(), want.c_str());
}

}  // namespace

// ---- Sha256 ---------------------------------------------------------------

Test(capture, sha256_known_digests) {
  expect_str(Sha256::hex_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "empty");
  expect_str(Sha256::hex_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "abc");
  // FIPS 180-2 vector: one million 'a', fed in uneven pieces.
  Sha256 h;
  std::string piece(999, 'a');
  std::size_t fed = 0;
  while (fed + piece.size() <= 1000000) {
    h.update(piece);
    fed += piece.size();
  }
  h.update(std::string(1000000 - fed, 'a'));
  expect_str(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "1e6 a");
}

Test(capture, sha256_incremental_matches_oneshot_and_digest_is_not_final) {
  std::string mib(1 << 20, 'a');
  Sha256 h;
  h.update(std::string_view(mib).substr(0, 12345));
  std::string mid = h.hex_digest();  // must not end the stream
  expect_str(mid, evp_oneshot_hex(std::string_view(mib).substr(0, 12345)), "prefix");
  h.update(std::string_view(mib).substr(12345));
  expect_str(h.hex_digest(), evp_oneshot_hex(mib), "1 MiB");
  expect_str(h.hex_digest(), evp_oneshot_hex(mib), "twice");
}

// ---- SecretMasker ---------------------------------------------------------

Test(capture, secret_split_at_every_point_is_masked) {
  const std::string secret = "s3cr3t-Value";
  const std::string text = "before " + secret + " after";
  for (std::size_t k = 0; k <= text.size(); ++k) {
    SecretMasker m({secret});
    std::string out = m.feed(std::string_view(text).substr(0, k));
    out += m.feed(std::string_view(text).substr(k));
    out += m.finish();
    cr_assert(out == "before *** after", "split at %zu: '%s'", k, out.c_str());
  }
}

Test(capture, secret_one_byte_per_chunk_is_masked) {
  SecretMasker m({"hunter2", "pw"});
  std::string text = "a hunter2 b pw c hunter2hunter2";
  std::string out = mask_in_chunks(m, text, std::vector<std::size_t>(text.size(), 1));
  expect_str(out, "a *** b *** c ******", "byte chunks");
}

Test(capture, longest_match_wins_and_overlaps_merge) {
  expect_str(mask_whole({"abc", "abcdef"}, "xabcdefx"), "x***x", "prefix secret");
  expect_str(mask_whole({"abcdef", "abc"}, "xabcx"), "x***x", "shorter alone");
  expect_str(mask_whole({"cde", "abcdef"}, "_abcdef_cde_"), "_***_***_", "substring secret");
  expect_str(mask_whole({"abc", "bcd"}, "xabcdy"), "x***y", "overlap merges, no 'd' leaks");
  expect_str(mask_whole({"abc"}, "abcabc"), "******", "adjacent stay separate");
  expect_str(mask_whole({"aa"}, "aaaa"), "***", "self-overlap merges");
  expect_str(mask_whole({"", "tok"}, "tok"), "***", "empty secret ignored");
  expect_str(mask_whole({"tok"}, ""), "", "empty text");
}

Test(capture, random_chunkings_agree_with_reference) {
  std::mt19937 rng(12345);
  const std::vector<std::vector<std::string>> sets = {
      {"ab"}, {"aba", "ba"}, {"abcab", "cab", "b"}, {"aaaa", "aab", "ba"}, {"abcabcabc"}};
  for (const auto& secrets : sets) {
    for (int round = 0; round < 200; ++round) {
      std::string text(rng() % 80, 'a');
      for (char& c : text) c = static_cast<char>('a' + rng() % 3);
      std::vector<std::size_t> sizes;
      for (std::size_t i = 0; i < text.size(); ++i) sizes.push_back(1 + rng() % 7);
      SecretMasker m(secrets);
      std::string got = mask_in_chunks(m, text, sizes);
      std::string want = reference_mask(secrets, text);
      cr_assert(got == want, "secrets[0]=%s text=%s got=%s want=%s", secrets[0].c_str(), text.c_str(),
                got.c_str(), want.c_str());
    }
  }
}

// The masker's search tests two bytes of a secret 16 starts at a time
// before comparing it whole: every start offset within a block, the tail
// after the last whole block, and a `from` or `end` inside a block must
// answer as std::string_view::find does.
Test(capture, secret_search_agrees_with_find_at_every_offset) {
  std::mt19937 rng(4242);
  const std::vector<std::string> secrets = {"hunter2-swordfish", "xy", "q", "abcabcabcabcabcabcabcab", "zzzz"};
  const SecretSet set(secrets);
  for (int round = 0; round < 400; ++round) {
    std::string text(rng() % 140, 'a');
    for (char& c : text) {
      // Mostly the secrets' own bytes, so partial matches abound.
      const std::string& s = secrets[rng() % secrets.size()];
      c = s[rng() % s.size()];
    }
    // Plant a few whole occurrences at random places.
    for (int k = 0; k < 3; ++k) {
      const std::string& s = set.values()[rng() % set.values().size()];
      if (text.size() >= s.size()) text.replace(rng() % (text.size() - s.size() + 1), s.size(), s);
    }
    const std::string_view t(text);
    for (std::size_t i = 0; i < set.values().size(); ++i) {
      const std::string& s = set.values()[i];
      std::size_t from = text.empty() ? 0 : rng() % (text.size() + 1);
      std::size_t end = from + rng() % (text.size() - from + 1);
      std::size_t want = t.substr(0, end).find(s, from);
      std::size_t got = set.find(i, t, from, end);
      cr_assert_eq(got, want, "secret '%s' text '%s' from %zu end %zu: got %zu want %zu", s.c_str(), text.c_str(),
                   from, end, got, want);
    }
  }
}

// Chunks long enough for the block-wise search, secrets whose rare bytes
// sit at the start, the middle and the end: streamed masking agrees with
// the reference.
Test(capture, long_chunks_agree_with_reference) {
  std::mt19937 rng(99);
  const std::vector<std::vector<std::string>> sets = {
      {"hunter2-swordfish"}, {"a-b", "b-c-a"}, {"aaaaaaaaaaaaaaaaaaaaaaaa-"}, {"-aaaaaaaaaaaaaaaaaab", "b"}};
  for (const auto& secrets : sets) {
    for (int round = 0; round < 150; ++round) {
      std::string alphabet;
      for (const auto& s : secrets) alphabet += s;
      std::string text(rng() % 700, 'a');
      for (char& c : text) c = alphabet[rng() % alphabet.size()];
      std::vector<std::size_t> sizes;
      for (std::size_t i = 0; i < text.size(); ++i) sizes.push_back(1 + rng() % 120);
      SecretMasker m(secrets);
      std::string got = mask_in_chunks(m, text, sizes);
      std::string want = reference_mask(secrets, text);
      cr_assert(got == want, "secrets[0]=%s text=%s got=%s want=%s", secrets[0].c_str(), text.c_str(), got.c_str(),
                want.c_str());
    }
  }
}

Test(capture, feed_view_passes_clean_chunks_through_and_agrees_with_feed) {
  SecretMasker m(std::vector<std::string>{"hunter2"});
  std::string out;
  std::string_view clean = "nothing to see here\n";
  std::string_view got = m.feed_view(clean, out);
  cr_assert(got.data() == clean.data() && got.size() == clean.size(), "a clean chunk was copied");
  cr_assert(out.empty());
  // A secret, a held-back prefix, then its completion: the same bytes feed() gives.
  std::string masked(m.feed_view("pw=hunter2;", out));
  cr_assert_str_eq(masked.c_str(), "pw=***;");
  out.clear();
  cr_assert_eq(m.feed_view("tail hun", out).size(), 5u, "'hun' must be held back");
  out.clear();
  std::string rest(m.feed_view("ter2!", out));
  cr_assert_str_eq(rest.c_str(), "***!");
  // Random chunkings through feed_view agree with the reference.
  std::mt19937 rng(777);
  const std::vector<std::string> secrets = {"aba", "ba"};
  for (int round = 0; round < 200; ++round) {
    std::string text(rng() % 60, 'a');
    for (char& c : text) c = static_cast<char>('a' + rng() % 3);
    SecretMasker v(secrets);
    std::string all, buf;
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t n = std::min<std::size_t>(1 + rng() % 7, text.size() - pos);
      buf.clear();
      all += std::string(v.feed_view(std::string_view(text).substr(pos, n), buf));
      pos += n;
    }
    all += v.finish();
    std::string want = reference_mask(secrets, text);
    cr_assert(all == want, "text=%s got=%s want=%s", text.c_str(), all.c_str(), want.c_str());
  }
}

Test(capture, hold_back_is_bounded_by_longest_minus_one) {
  // Digits 0-7 only: prefixes of "0123456789" keep occurring, the secret never does.
  SecretMasker m({"0123456789", "xyz"});
  std::size_t in = 0, out = 0, most_held = 0;
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string chunk(rng() % 13, '0');
    for (std::size_t j = 0; j < chunk.size(); ++j) chunk[j] = static_cast<char>('0' + (j + rng() % 2) % 8);
    in += chunk.size();
    out += m.feed(chunk).size();
    cr_assert_leq(m.held_back(), 9u);
    cr_assert_eq(in, out + m.held_back(), "bytes lost or invented");
    most_held = std::max(most_held, m.held_back());
  }
  cr_assert_geq(most_held, 2u, "the test never exercised hold-back");
  out += m.finish().size();
  cr_assert_eq(out, in);
  cr_assert_eq(m.held_back(), 0u);
}

Test(capture, lines_that_cannot_start_a_secret_stream_without_delay) {
  SecretMasker m({"a-long-secret-value"});
  expect_str(m.feed("progress 50%\n"), "progress 50%\n", "whole line");
  cr_assert_eq(m.held_back(), 0u);
  expect_str(m.feed("next: a-lo"), "next: ", "possible secret start held");
  cr_assert_eq(m.held_back(), 4u);
  expect_str(m.feed("gin\n"), "a-login\n", "released once it cannot be the secret");
}

Test(capture, no_secrets_is_a_pass_through) {
  SecretMasker m({"", ""});
  cr_assert(!m.has_secrets());
  std::string chunk("bin\0ary", 7);
  cr_assert(m.feed(chunk) == chunk);
  cr_assert_eq(m.held_back(), 0u);
  cr_assert(m.finish().empty());
}

Test(capture, finish_flushes_the_held_back_tail) {
  SecretMasker m({"abcdef"});
  expect_str(m.feed("xyz abc"), "xyz ", "held back");  // "abc" might start the secret
  cr_assert_eq(m.held_back(), 3u);
  expect_str(m.finish(), "abc", "tail");
  SecretMasker m2({"abcdef"});
  std::string out = m2.feed("..abcd");
  out += m2.feed("ef");
  expect_str(out + m2.finish(), "..***", "secret at the very end");
}

Test(capture, fresh_maskers_share_secrets_not_state) {
  SecretMasker a({"secret"});
  SecretMasker b = a.fresh();
  std::string out_a = a.feed("sec");
  std::string out_b = b.feed("ret ok");
  out_a += a.finish();
  out_b += b.finish();
  expect_str(out_a, "sec", "a");
  expect_str(out_b, "ret ok", "b");
}

// ---- StreamCapture --------------------------------------------------------

Test(capture, stream_cap_truncated_total_and_hash) {
  StreamCapture c(10);
  expect_str(std::string(c.on_data("hello ")), "hello ", "chunk 1");
  c.on_data("world, and more");
  c.finish();
  expect_str(c.kept(), "hello worl", "kept");
  cr_assert(c.truncated());
  cr_assert_eq(c.total_bytes(), 21u);
  expect_str(c.sha256_hex(), Sha256::hex_of("hello world, and more"), "hash of all bytes");

  StreamCapture exact(5);
  exact.on_data("12345");
  exact.finish();
  cr_assert(!exact.truncated(), "exactly cap is not truncated");
  StreamCapture none(0);
  none.on_data("x");
  cr_assert(none.kept().empty());
  cr_assert(none.truncated());
  cr_assert_eq(none.total_bytes(), 1u);
}

// What a streaming caller is given stops at the cap, like what is kept: a
// library caller's on_output was given every byte past it (100,000 bytes
// under stdout_bytes=10).
Test(capture, streamed_bytes_stop_at_the_cap) {
  StreamCapture c(10);
  std::string streamed;
  streamed += c.on_data("hello ");
  streamed += c.on_data("world, and more");
  streamed += c.finish();
  expect_str(streamed, "hello worl", "streamed");
  cr_assert(c.truncated());
  cr_assert_eq(c.total_bytes(), 21u);

  StreamCapture m(4, SecretMasker({"pw"}));
  std::string masked = std::string(m.on_data("ab pw cd"));
  masked += m.finish();
  expect_str(masked, "ab *", "masked, then cut");
}

// Past 1 MiB the kept buffer reserves the whole cap at once: what is kept
// is still the stream's first `cap` bytes, byte for byte, and the buffer
// was not grown by doubling (its capacity is the cap).
Test(capture, a_long_stream_keeps_exactly_its_cap) {
  const std::size_t cap = (3 << 20) + 7;
  StreamCapture c(cap);
  std::string all;
  for (int i = 0; all.size() < (5u << 20); ++i) {
    std::string chunk(256 * 1024 - 13 * (i % 3), static_cast<char>('a' + i % 26));
    chunk[0] = '\n';
    all += chunk;
    c.on_data(chunk);
  }
  c.finish();
  cr_assert(c.truncated());
  cr_assert_eq(c.total_bytes(), all.size());
  cr_assert(c.kept() == std::string_view(all).substr(0, cap), "kept is not the stream's first cap bytes");
  expect_str(c.sha256_hex(), Sha256::hex_of(all), "hash of every byte");
  std::string kept = c.take_kept();
  cr_assert_eq(kept.capacity(), cap, "reserved once, to the cap");
}

Test(capture, stream_masks_hashes_masked_and_counts_raw) {
  StreamCapture c(1000, SecretMasker({"TOPSECRET"}));
  std::string streamed;
  streamed += c.on_data("key=TOP");
  streamed += c.on_data("SECRET;");
  streamed += c.on_data("again TOPSECRET");
  streamed += c.finish();
  expect_str(streamed, "key=***;again ***", "streamed");
  expect_str(c.kept(), "key=***;again ***", "kept");
  cr_assert_eq(c.total_bytes(), std::string("key=TOPSECRET;again TOPSECRET").size());
  expect_str(c.sha256_hex(), Sha256::hex_of("key=***;again ***"), "hash of masked stream");
  cr_assert(c.sha256_hex() != Sha256::hex_of("key=TOPSECRET;again TOPSECRET"));
  cr_assert(!c.truncated());
}

Test(capture, stream_cap_applies_to_masked_bytes_and_hash_covers_dropped_ones) {
  StreamCapture c(4, SecretMasker({"pw"}));
  c.on_data("ab pw cd");
  c.finish();
  expect_str(c.kept(), "ab *", "kept");
  cr_assert(c.truncated());
  expect_str(c.sha256_hex(), Sha256::hex_of("ab *** cd"), "hash");
}

// A program that echoes a secret in pieces, each piece at the end or the
// start of a big read (the supervisor reads up to 256 KiB at a time):
// every split point of every secret, the pieces inside chunks long enough
// that the masker passes the rest of the chunk on without copying it.
// Overlapping secrets are split too, so a "***" that began in one chunk
// must swallow the next chunk's first bytes. Checked against the
// reference: what is streamed, what is kept and the hash.
Test(capture, secret_split_across_big_chunks_at_every_point_is_masked) {
  const std::vector<std::vector<std::string>> sets = {
      {"hunter2-swordfish"}, {"hunter2-swordfish", "fish-hunter2"}, {"abab"}, {"xyz", "y"}};
  std::mt19937 rng(2026);
  for (const auto& secrets : sets) {
    std::string alphabet = "the harbour held a hundred hulls\n";
    for (const auto& s : secrets) alphabet += s;
    auto filler = [&](std::size_t n) {
      std::string f(n, ' ');
      for (char& c : f) c = alphabet[rng() % alphabet.size()];
      return f;
    };
    // What is echoed at a split: one secret, or two overlapping ones run together.
    std::vector<std::string> echoes(secrets.begin(), secrets.end());
    if (secrets.size() > 1) echoes.push_back(secrets[0] + secrets[1].substr(secrets[1].size() / 2));
    echoes.push_back(secrets[0] + secrets[0]);  // back to back
    for (const auto& echo : echoes) {
      for (std::size_t k = 0; k <= echo.size(); ++k) {
        // chunk 1 ends in echo[0, k); chunk 2 starts with echo[k, ...) and
        // ends in a prefix of the echo again; chunk 3 completes it.
        const std::size_t j = rng() % (echo.size() + 1);
        std::vector<std::string> chunks = {filler(200 + rng() % 300) + echo.substr(0, k),
                                           echo.substr(k) + filler(200 + rng() % 300) + echo.substr(0, j),
                                           echo.substr(j) + filler(100)};
        std::string text;
        for (const auto& c : chunks) text += c;
        const std::string want = reference_mask(secrets, text);
        StreamCapture cap(1 << 20, SecretMasker(secrets));
        std::string streamed;
        for (const auto& c : chunks) {
          MaskedPieces p = cap.on_data_pieces(c);
          streamed.append(p.head);
          streamed.append(p.body);
        }
        streamed += cap.finish();
        cr_assert(streamed == want, "secret '%s' echo '%s' split at %zu and %zu: streamed\n%s\nwant\n%s",
                  secrets[0].c_str(), echo.c_str(), k, j, streamed.c_str(), want.c_str());
        expect_str(cap.kept(), want, "kept");
        expect_str(cap.sha256_hex(), Sha256::hex_of(want), "hash of the masked stream");
        cr_assert_eq(cap.total_bytes(), text.size());
        // The joined view agrees (on_data: what a caller of one view gets).
        StreamCapture joined(1 << 20, SecretMasker(secrets));
        std::string viewed;
        for (const auto& c : chunks) viewed += joined.on_data(c);
        viewed += joined.finish();
        expect_str(viewed, want, "on_data");
      }
    }
  }
}

// What needs no masking is not copied: a clean chunk after a held-back
// tail comes back as the tail's bytes (copied) and a view of the chunk.
Test(capture, feed_pieces_copies_only_the_held_back_tail) {
  SecretMasker m(std::vector<std::string>{"hunter2-swordfish"});
  std::string out;
  const std::string first = std::string(1000, '.') + "hun";
  MaskedPieces a = m.feed_pieces(first, out);
  cr_assert(a.head.empty());
  cr_assert(a.body.data() == first.data() && a.body.size() == 1000, "the clean part is a view of the chunk");
  cr_assert_eq(m.held_back(), 3u);
  const std::string second = "ting season" + std::string(1000, '.');
  out.clear();
  MaskedPieces b = m.feed_pieces(second, out);
  expect_str(std::string(b.head), "hun", "the tail, decided");
  cr_assert(b.body.data() == second.data() && b.body.size() == second.size(), "the rest is a view of the chunk");
}

// The same through a real run: the program echoes a secret split at every
// point, the pieces a pause apart (so they end and begin separate reads),
// with 200 bytes before each. Nothing of it is streamed or kept, and the
// hash is the masked text's.
Test(capture, a_program_echoing_a_secret_in_pieces_never_shows_it) {
  const std::string secret = "hunter2-swordfish";
  setenv("CORRAL_TEST_PIECES", secret.c_str(), 1);
  corral_test::Harness h;
  Request r;
  r.tier = Tier::none;
  r.argv = {corral_test::helper("hostile"), "secret-pieces", "CORRAL_TEST_PIECES"};
  r.secrets.push_back(SecretRef{"CORRAL_TEST_PIECES", "", {}});
  std::string streamed;
  RunCallbacks cb;
  cb.on_output = [&](StreamId, std::string_view data) { streamed.append(data); };
  std::optional<Result> got;
  cb.on_result = [&](const Result& res) { got = res; };
  auto handle = h.sup->submit(std::move(r), std::move(cb));
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert(got.has_value());
  cr_assert_eq(got->outcome, Outcome::exited, "%s", got->detail.c_str());
  std::string want;
  for (std::size_t k = 0; k <= secret.size(); ++k) want += std::string(200, '.') + "***\n";
  expect_str(streamed, want, "streamed");
  expect_str(got->stdout_capture.text, want, "kept");
  expect_str(got->stdout_capture.sha256, Sha256::hex_of(want), "hash");
  cr_assert_eq(got->stdout_capture.bytes, (secret.size() + 1) * (200 + secret.size() + 1));
}

// ---- UTF-8 ----------------------------------------------------------------

Test(capture, utf8_lossy_keeps_valid_text) {
  std::string valid = std::string("plain \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 nul:") + '\0' + "!";
  cr_assert(to_utf8_lossy(valid) == valid);
  cr_assert(to_utf8_lossy("").empty());
}

Test(capture, utf8_lossy_replaces_maximal_subparts) {
  const std::string r = "\xEF\xBF\xBD";
  struct Case {
    std::string in, want;
  } cases[] = {
      {"\xFF", r},
      {"a\xC3", "a" + r},                       // truncated at the end
      {"\xC0\xAF", r + r},                      // overlong: C0 never valid
      {"\xE0\x80\xAF", r + r + r},              // overlong 3-byte
      {"\xED\xA0\x80", r + r + r},              // surrogate
      {"\xF4\x90\x80\x80", r + r + r + r},      // above U+10FFFF
      {"\xE2\x82x", r + "x"},                   // one FFFD for the 2-byte subpart
      {"\xF1\x80\x80" "A", r + "A"},
      {"\x80\x80", r + r},                      // lone continuations
      {"ok\xC3\xA9\xFEok", "ok\xC3\xA9" + r + "ok"},
  };
  for (const auto& c : cases) {
    std::string got = to_utf8_lossy(c.in);
    cr_assert(got == c.want, "input of %zu bytes: got %zu bytes, want %zu", c.in.size(), got.size(),
              c.want.size());
  }
}
