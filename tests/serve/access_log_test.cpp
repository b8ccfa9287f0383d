// The access line (issue 34): client, method, target, status, latency and the tokens, one line
// whatever the target holds; AccessLogResponder writes it once, when the answer completes.
#include "moeserve/serve/access_log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace moeserve::serve {
namespace {

TEST(AccessLogTest, LineFields) {
    EXPECT_EQ(access_log_line("127.0.0.1:5000", "POST", "/v1/completions", 200, 0.1534, std::pair{5, 16}),
              "127.0.0.1:5000 - \"POST /v1/completions\" 200 0.153s prompt_tokens=5 completion_tokens=16");
    EXPECT_EQ(access_log_line("[::1]:7", "GET", "/health", 503, 0, std::nullopt),
              "[::1]:7 - \"GET /health\" 503 0.000s");
}

TEST(AccessLogTest, QuotesAndControlBytesCannotForgeALine) {
    const std::string line = access_log_line("evil\n", "GET", "/a\"b\r\nINFO fake", 404, 0, std::nullopt);
    EXPECT_EQ(line, "evil%0A - \"GET /a%22b%0D%0AINFO fake\" 404 0.000s");
}

class RecordingResponder : public Responder {
public:
    void respond(int s, std::string, std::string) override { status = s; }
    void start_stream() override { status = 200; }
    void send_chunk(std::string data) override { chunks += data; }
    void end_stream() override { ended = true; }
    void on_disconnect(std::function<void()>) override {}
    int status = 0;
    std::string chunks;
    bool ended = false;
};

std::string read_all(FILE* f) {
    std::rewind(f);
    std::string out;
    char buf[512];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
    return out;
}

TEST(AccessLogTest, ResponderPassesCallsOnAndWritesOneLine) {
    FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    {
        Logger logger("api", LogLevel::kInfo, out);
        auto inner = std::make_shared<RecordingResponder>();
        HttpRequest request;
        request.method = "POST";
        request.target = "/v1/chat/completions";
        AccessLogResponder r(inner, request, "127.0.0.1:9", logger);
        r.start_stream();
        r.send_chunk("data: x\n\n");
        r.note_usage(3, 4);
        r.end_stream();
        r.end_stream();  // a second end writes nothing more
        EXPECT_TRUE(inner->ended);
        EXPECT_EQ(inner->chunks, "data: x\n\n");
    }
    const std::string text = read_all(out);
    std::fclose(out);
    EXPECT_NE(text.find("127.0.0.1:9 - \"POST /v1/chat/completions\" 200 "), std::string::npos) << text;
    EXPECT_NE(text.find("s prompt_tokens=3 completion_tokens=4"), std::string::npos) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
}

}  // namespace
}  // namespace moeserve::serve
