// strata tokenize / detokenize: JSON lines in, JSON lines out, for checking
// the tokenizer against other implementations and for scripting.
//   tokenize:   one JSON string per line  -> one JSON array of ids per line
//   detokenize: one JSON array of ids per line -> one JSON string per line
#include <time.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "text/tokenizer.h"
#include "core/error.h"
#include "core/json.h"

namespace strata::cli {

namespace {

struct IoFlags {
  std::string tokenizer, jsonl;
};

void add_io_flags(CLI::App* cmd, IoFlags& f, const char* what) {
  cmd->add_option("--tokenizer", f.tokenizer, "tokenizer.json, or a model directory holding one")->required();
  cmd->add_option("--jsonl", f.jsonl, what)->required();
}

// Reads all lines of `path` ("-" = standard input), each parsed as JSON.
std::vector<Json> read_jsonl(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) fail("{}: cannot open", path);
    in = &file;
  }
  std::vector<Json> lines;
  std::string line;
  for (size_t n = 1; std::getline(*in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(parse_json(line, fmt::format("{}:{}", path, n)));
  }
  if (in->bad()) fail("{}: read error", path);
  return lines;
}

void write_out(const std::string& s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) fail("cannot write to standard output");
}

}  // namespace

void add_tokenize_command(CLI::App& app, Runner& run) {
  struct Flags {
    IoFlags io;
    bool add_special = false;
    int repeat = 1;
    bool time = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Text to token ids (JSON lines)");
  add_io_flags(cmd, f->io, "Input: one JSON string per line (- for standard input)");
  cmd->add_flag("--add-special", f->add_special, "Apply the post-processor (e.g. add BOS tokens)");
  cmd->add_option("--repeat", f->repeat, "Encode the input this many times (benchmarking)")->check(CLI::Range(1, 1000));
  cmd->add_flag("--time", f->time, "Print encode throughput (JSON) to standard error");
  cmd->callback([f, &run] {
    run = [f]() -> int {
      const Tokenizer tok = Tokenizer::load(f->io.tokenizer);
      std::vector<std::string> texts;
      const std::vector<Json> lines = read_jsonl(f->io.jsonl);
      texts.reserve(lines.size());
      for (size_t i = 0; i < lines.size(); ++i) {
        if (!lines[i].is_string()) fail("{}:{}: expected a JSON string", f->io.jsonl, i + 1);
        texts.push_back(lines[i].get<std::string>());
      }
      std::vector<std::vector<int32_t>> ids(texts.size());
      size_t bytes = 0;
      for (const std::string& t : texts) bytes += t.size();
      const auto cpu_now = [] {
        timespec ts{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
      };
      const double c0 = cpu_now();
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < f->repeat; ++r) {
        for (size_t i = 0; i < texts.size(); ++i) ids[i] = tok.encode(texts[i], f->add_special);
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double cpu = cpu_now() - c0;
      std::string out;
      for (const auto& v : ids) {
        out += '[';
        for (size_t k = 0; k < v.size(); ++k) {
          if (k) out += ',';
          out += std::to_string(v[k]);
        }
        out += "]\n";
      }
      write_out(out);
      if (f->time) {
        const double total = static_cast<double>(bytes) * f->repeat;
        std::fprintf(stderr, "{\"bytes\": %.0f, \"seconds\": %.6f, \"cpu_seconds\": %.6f, \"mb_per_s\": %.3f}\n",
                     total, secs, cpu, secs > 0 ? total / 1e6 / secs : 0.0);
      }
      return 0;
    };
  });
}

void add_detokenize_command(CLI::App& app, Runner& run) {
  struct Flags {
    IoFlags io;
    bool skip_special = false, stream = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("detokenize", "Token ids to text (JSON lines)");
  add_io_flags(cmd, f->io, "Input: one JSON array of ids per line (- for standard input)");
  cmd->add_flag("--skip-special", f->skip_special, "Leave out special tokens");
  cmd->add_flag("--stream", f->stream, "Decode one id at a time, as generation does");
  cmd->callback([f, &run] {
    run = [f]() -> int {
      const Tokenizer tok = Tokenizer::load(f->io.tokenizer);
      const std::vector<Json> lines = read_jsonl(f->io.jsonl);
      std::string out;
      for (size_t i = 0; i < lines.size(); ++i) {
        const Json& l = lines[i];
        std::vector<int32_t> ids;
        if (!l.is_array()) fail("{}:{}: expected a JSON array of token ids", f->io.jsonl, i + 1);
        for (const Json& v : l) {
          if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
            fail("{}:{}: expected integer token ids", f->io.jsonl, i + 1);
          }
          ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
        }
        std::string text;
        if (f->stream) {
          StreamDecoder d(tok, f->skip_special);
          for (const int32_t id : ids) text += d.push(id);
          text += d.flush();
        } else {
          text = tok.decode(ids, f->skip_special);
        }
        out += Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
        out += '\n';
      }
      write_out(out);
      return 0;
    };
  });
}

}  // namespace strata::cli
