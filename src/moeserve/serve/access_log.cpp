#include "moeserve/serve/access_log.h"

#include <fmt/format.h>

namespace moeserve::serve {

namespace {
// The target as the client sent it, but with quotes and control bytes %-escaped: a crafted
// target cannot end the quoted field or forge a second log line.
std::string loggable(const std::string& text) {
    std::string out;
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte == 0x7f || c == '"')
            out += fmt::format("%{:02X}", byte);
        else
            out += c;
    }
    return out;
}
}  // namespace

std::string access_log_line(const std::string& client, const std::string& method, const std::string& target, int status,
                            double seconds, std::optional<std::pair<int64_t, int64_t>> usage) {
    std::string line =
        fmt::format("{} - \"{} {}\" {} {:.3f}s", loggable(client), loggable(method), loggable(target), status, seconds);
    if (usage) line += fmt::format(" prompt_tokens={} completion_tokens={}", usage->first, usage->second);
    return line;
}

AccessLogResponder::AccessLogResponder(std::shared_ptr<Responder> inner, const HttpRequest& request, std::string client,
                                       Logger& logger)
    : inner_(std::move(inner)),
      method_(request.method),
      target_(request.target),
      client_(std::move(client)),
      logger_(logger) {}

void AccessLogResponder::respond(int status, std::string content_type, std::string body) {
    inner_->respond(status, std::move(content_type), std::move(body));
    write_line(status);
}

void AccessLogResponder::start_stream() { inner_->start_stream(); }

void AccessLogResponder::send_chunk(std::string data) { inner_->send_chunk(std::move(data)); }

void AccessLogResponder::end_stream() {
    inner_->end_stream();
    write_line(200);  // a stream's status went out with its headers; errors after that are events in it
}

void AccessLogResponder::on_disconnect(std::function<void()> fn) { inner_->on_disconnect(std::move(fn)); }

void AccessLogResponder::note_usage(int64_t prompt_tokens, int64_t completion_tokens) {
    std::lock_guard lock(mutex_);
    usage_ = {prompt_tokens, completion_tokens};
}

void AccessLogResponder::write_line(int status) {
    std::optional<std::pair<int64_t, int64_t>> usage;
    {
        std::lock_guard lock(mutex_);
        if (written_) return;  // one line per request, whatever a caller does twice
        written_ = true;
        usage = usage_;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const std::string line = access_log_line(client_, method_, target_, status, seconds, usage);
    MOESERVE_LOG_I(logger_, "access", "%s", line.c_str());
}

}  // namespace moeserve::serve
