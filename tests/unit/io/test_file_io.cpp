// io/file_io.hpp and the files of a checkpoint: JSON and text
// files are read only from regular files and only up to 64 MiB; a NUL byte in a shard name is
// refused; outputs are written through a fresh temporary (never an existing OUT.tmp, never one left
// behind) and never replace what is not a regular file; an output is compared with the inputs by
// inode. FIFOs and device nodes are made in each test's own scratch folder.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <polymoe/io/checkpoint_files.hpp>
#include <polymoe/io/file_io.hpp>
#include <polymoe/io/safetensors.hpp>

namespace {

namespace fs = std::filesystem;
using namespace polymoe::io;

// A scratch folder per test, removed afterwards.
class file_io : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("polymoe_fio_") + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path file(const std::string& name) const { return dir_ / name; }
  fs::path text(const std::string& name, const std::string& content) const {
    std::ofstream(file(name), std::ios::binary) << content;
    return file(name);
  }
  static std::string contents(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path fifo(const std::string& name) const {
    const auto p = file(name);
    if (::mkfifo(p.c_str(), 0644) != 0) throw std::runtime_error("mkfifo failed");
    return p;
  }
  // A character device node (major, minor) in the scratch folder; empty when not permitted.
  fs::path device(const std::string& name, unsigned major, unsigned minor) const {
    const auto p = file(name);
    return ::mknod(p.c_str(), S_IFCHR | 0666, makedev(major, minor)) == 0 ? p : fs::path();
  }
  fs::path dir_;
};

// Expects `f` to throw polymoe::error whose message holds every one of `parts` and not "Success".
template <class F>
void expect_error(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
    ADD_FAILURE() << "no polymoe::error thrown";
  } catch (const polymoe::error& e) {
    const std::string what = e.what();
    for (const auto p : parts) EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
    EXPECT_EQ(what.find("Success"), std::string::npos) << what;
  }
}

bool still_fifo(const fs::path& p) { return fs::is_fifo(fs::symlink_status(p)); }
bool still_char_device(const fs::path& p) { return fs::is_character_file(fs::symlink_status(p)); }

const std::vector<float> values = {1.0f, 2.0f, 3.0f};

// ---- reading: regular files only, bounded

// The message of the polymoe::error `read` throws on the FIFO `p` ("no error" when none); a
// failure, not a hang, when it blocks.
template <class F>
std::string error_reading_fifo(const fs::path& p, F read) {
  auto result = std::async(std::launch::async, [&] {
    try {
      read();
      return std::string("no error");
    } catch (const polymoe::error& e) {
      return std::string(e.what());
    }
  });
  if (result.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    // blocked in open(): a writer that opens and closes the FIFO lets it end
    const int w = ::open(p.c_str(), O_WRONLY);
    if (w >= 0) ::close(w);
    ADD_FAILURE() << "reading a FIFO blocked";
  }
  return result.get();
}

TEST_F(file_io, json_from_a_fifo_is_refused_without_blocking) {
  const auto p = fifo("config.json");
  const std::string what = error_reading_fifo(p, [&] { (void)read_json_file(p); });
  EXPECT_NE(what.find("config.json"), std::string::npos) << what;
  EXPECT_NE(what.find("not a regular file (a FIFO)"), std::string::npos) << what;
  EXPECT_TRUE(still_fifo(p));
}

TEST_F(file_io, json_through_a_link_to_a_device_is_refused) {
  const auto zero = device("zero", 1, 5);  // /dev/zero's numbers, made here
  if (zero.empty()) GTEST_SKIP() << "mknod is not permitted here";
  fs::create_symlink(zero, file("config.json"));
  expect_error([&] { (void)read_json_file(file("config.json")); },
               {"config.json", "not a regular file (a character device)"});
  expect_error([&] { (void)read_text_file(zero); }, {"a character device"});
  EXPECT_TRUE(still_char_device(zero));
}

TEST_F(file_io, text_files_are_bounded_at_64_mib) {
  const auto big = file("model.safetensors.index.json");
  { std::ofstream(big, std::ios::binary) << "{}"; }
  fs::resize_file(big, max_text_file_bytes + 1);  // sparse
  expect_error([&] { (void)read_json_file(big); },
               {"model.safetensors.index.json", "67108865 bytes", "limit of 64 MiB (67108864 bytes)"});
  fs::resize_file(big, 2);
  EXPECT_TRUE(read_json_file(big).is_object());
}

TEST_F(file_io, text_read_errors_name_the_file_and_the_cause) {
  expect_error([&] { (void)read_text_file(file("absent.json")); }, {"absent.json", "No such file or directory"});
  expect_error([&] { (void)read_text_file(dir_); }, {"not a regular file (a directory)"});
  expect_error([&] { (void)read_text_file(""); }, {"the file name is empty"});
  expect_error([&] { (void)read_text_file(file(std::string("a\0b", 3))); }, {"NUL byte"});
  EXPECT_EQ(read_text_file(text("t.txt", "hello")), "hello");
}

TEST_F(file_io, safetensors_reader_refuses_a_fifo_without_blocking) {
  const auto p = fifo("model.safetensors");
  const std::string what = error_reading_fifo(p, [&] { (void)safetensors_file::open(p); });
  EXPECT_NE(what.find("safetensors file"), std::string::npos) << what;
  EXPECT_NE(what.find("not a regular file (a FIFO)"), std::string::npos) << what;
}

// ---- a NUL byte in a shard name

TEST_F(file_io, nul_byte_in_a_shard_name_is_refused) {
  save_safetensors(file("model.safetensors"), {tensor_view<float>("w", {3}, std::span<const float>(values))});
  text("model.safetensors.index.json", R"({"weight_map": {"w": "model.safetensors\u0000.bak"}})");
  expect_error([&] { (void)checkpoint_files::open(dir_); },
               {"model.safetensors.index.json", "weight_map['w']", "NUL byte"});
  text("model.safetensors.index.json", R"({"weight_map": {"w": "../model.safetensors"}})");
  expect_error([&] { (void)checkpoint_files::open(dir_); }, {"is not a file name in the checkpoint directory"});
}

// ---- writing: a fresh temporary, removed on failure

TEST_F(file_io, an_existing_tmp_link_or_file_is_left_alone) {
  const auto victim = text("victim", "precious");
  fs::create_symlink(victim, file("out.safetensors.tmp"));
  const auto mine = text("other.json.tmp", "mine");
  save_safetensors(file("out.safetensors"), {tensor_view<float>("w", {3}, std::span<const float>(values))});
  write_text_file(file("other.json"), "{}");
  EXPECT_EQ(contents(victim), "precious");
  EXPECT_EQ(contents(mine), "mine");
  EXPECT_TRUE(fs::is_symlink(file("out.safetensors.tmp")));
  EXPECT_FALSE(fs::is_symlink(file("out.safetensors")));
  EXPECT_EQ(safetensors_file::open(file("out.safetensors")).to_f32("w"), values);
  EXPECT_EQ(contents(file("other.json")), "{}");
  EXPECT_EQ(listing(), (std::vector<std::string>{"other.json", "other.json.tmp", "out.safetensors",
                                                 "out.safetensors.tmp", "victim"}));
}

TEST_F(file_io, a_failed_write_leaves_no_temporary_and_the_old_file) {
  write_checkpoint(dir_, {{"w", dtype::F32, {3}, [](std::span<std::byte> b) { std::memcpy(b.data(), values.data(), 12); }}});
  const std::string before = contents(file("model.safetensors"));
  std::vector<tensor_source> ts = {{"a", dtype::F32, {3}, {}},
                                   {"b", dtype::F32, {3}, [](std::span<std::byte>) { throw std::runtime_error("fill"); }}};
  EXPECT_THROW(write_checkpoint(dir_, ts), std::runtime_error);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(contents(file("model.safetensors")), before);
  {
    atomic_output_file out(file("x.bin"));
    out.write(std::string_view("partial"));
    EXPECT_TRUE(fs::exists(out.temporary()));
    EXPECT_EQ(out.temporary().parent_path(), dir_);
  }  // never committed
  EXPECT_EQ(listing(), std::vector<std::string>{"model.safetensors"});
}

TEST_F(file_io, outputs_are_created_with_the_umask_applied) {
  const mode_t old = ::umask(022);
  write_text_file(file("a.json"), "{}");
  ::umask(old);
  EXPECT_EQ(fs::status(file("a.json")).permissions(),
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
}

// ---- outputs that are not regular files

TEST_F(file_io, an_output_that_is_a_fifo_or_device_is_refused_and_kept) {
  const auto p = fifo("out.safetensors");
  expect_error([&] { save_safetensors(p, {tensor_view<float>("w", {3}, std::span<const float>(values))}); },
               {"out.safetensors", "a FIFO, not a regular file"});
  expect_error([&] { write_text_file(p, "{}"); }, {"a FIFO"});
  EXPECT_TRUE(still_fifo(p));
  if (const auto null = device("null", 1, 3); !null.empty()) {  // /dev/null's numbers, made here
    fs::create_symlink(null, file("link_to_null"));
    for (const auto& target : {null, file("link_to_null")})
      expect_error([&] { write_text_file(target, "{}"); }, {"a character device, not a regular file"});
    EXPECT_TRUE(still_char_device(null));
  }
  EXPECT_EQ(listing().size(), fs::exists(file("null")) ? 3u : 1u);  // no temporary left
}

TEST_F(file_io, an_output_that_is_a_directory_or_empty_names_the_cause) {
  fs::create_directories(file("sub/inner"));
  expect_error([&] { save_safetensors(file("sub"), {tensor_view<float>("w", {3}, std::span<const float>(values))}); },
               {"'" + file("sub").string() + "'", "a directory, not a regular file"});
  expect_error([&] { write_text_file(dir_ / "sub/", "{}"); }, {"names a directory"});
  expect_error([&] { write_text_file("", "{}"); }, {"the file name is empty"});
  expect_error([&] { write_text_file(file(std::string("a\0b", 3)), "{}"); }, {"a\\0b'", "NUL byte"});
  expect_error([&] { write_text_file(file("missing/out.json"), "{}"); },
               {"cannot create a temporary file in", "No such file or directory"});
  EXPECT_EQ(listing(), std::vector<std::string>{"sub"});
}

// ---- outputs compared with the inputs by inode

TEST_F(file_io, same_file_follows_links_and_hard_links) {
  const auto a = text("a", "x");
  fs::create_symlink(a, file("sym"));
  fs::create_hard_link(a, file("hard"));
  const auto b = text("b", "x");
  EXPECT_TRUE(same_file(a, file("sym")));
  EXPECT_TRUE(same_file(file("hard"), file("sym")));
  EXPECT_FALSE(same_file(a, b));
  EXPECT_FALSE(same_file(a, file("absent")));
  const std::vector<fs::path> read = {b, a};
  expect_error([&] { require_not_overwriting(file("sym"), read, "run: the output 'sym'"); },
               {"run: the output 'sym' is the file '" + a.string() + "'", "refusing to overwrite"});
  EXPECT_NO_THROW(require_not_overwriting(file("absent"), read, "x"));
}

TEST_F(file_io, a_checkpoint_write_reports_the_bytes_written_after_each_tensor) {
  std::vector<tensor_source> ts;
  for (int i = 0; i < 5; ++i) ts.push_back({"t" + std::to_string(i), dtype::F32, {16 * (i + 1)}, {}});
  std::vector<std::uint64_t> seen;
  write_checkpoint(dir_, ts, 200, [&](std::uint64_t done) { seen.push_back(done); });  // sharded: across shards too
  // 64, 128, 192, 256, 320 bytes: the running total, tensor after tensor, in name order
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{64, 192, 384, 640, 960}));
}

TEST_F(file_io, the_paths_of_a_checkpoint_are_its_index_and_shards) {
  std::vector<tensor_source> ts;
  for (int i = 0; i < 3; ++i) ts.push_back({"t" + std::to_string(i), dtype::F32, {64}, {}});
  const auto written = write_checkpoint(dir_, ts, 300);  // 256 bytes each: one per shard
  ASSERT_EQ(written.size(), 3u);
  text("config.json", "{}");
  text("notes.txt", "not a checkpoint file");
  const auto c = checkpoint_files::open(dir_);
  const std::vector<fs::path> expect = {file("model.safetensors.index.json"), file(written[0]), file(written[1]),
                                        file(written[2])};
  EXPECT_EQ(c.paths(), expect);
  EXPECT_EQ(checkpoint_file_names(dir_), (std::vector<std::string>{"config.json", "model.safetensors.index.json",
                                                                   written[0], written[1], written[2]}));
}

}  // namespace
