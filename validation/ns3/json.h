// Minimal JSON reader for the schedule files written by rapidllm.network.export (objects, arrays, numbers,
// strings, true/false/null). Enough for our own exporter's output; not a general-purpose JSON library.
#pragma once

#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mini_json
{

struct Value
{
    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    double number = 0.0;
    bool boolean = false;
    std::string text;
    std::vector<Value> items;
    std::map<std::string, Value> fields;

    const Value& at(const std::string& key) const
    {
        auto it = fields.find(key);
        if (kind != Object || it == fields.end())
            throw std::runtime_error("schedule JSON: missing key '" + key + "'");
        return it->second;
    }

    bool has(const std::string& key) const { return kind == Object && fields.count(key); }

    std::vector<double> numbers() const
    {
        if (kind != Array)
            throw std::runtime_error("schedule JSON: expected an array of numbers");
        std::vector<double> out;
        out.reserve(items.size());
        for (const auto& v : items)
            out.push_back(v.number);
        return out;
    }
};

class Parser
{
  public:
    explicit Parser(const std::string& s) : s_(s) {}

    Value parse()
    {
        Value v = value();
        skip();
        if (i_ != s_.size())
            fail("trailing characters");
        return v;
    }

  private:
    const std::string& s_;
    size_t i_ = 0;

    [[noreturn]] void fail(const std::string& what) const
    {
        throw std::runtime_error("schedule JSON: " + what + " at offset " + std::to_string(i_));
    }

    void skip()
    {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
            ++i_;
    }

    bool eat(char c)
    {
        skip();
        if (i_ < s_.size() && s_[i_] == c)
        {
            ++i_;
            return true;
        }
        return false;
    }

    void expect(char c)
    {
        if (!eat(c))
            fail(std::string("expected '") + c + "'");
    }

    std::string str()
    {
        expect('"');
        std::string out;
        while (i_ < s_.size() && s_[i_] != '"')
        {
            if (s_[i_] == '\\' && i_ + 1 < s_.size())
                ++i_;   // plain escapes only (our exporter writes ASCII names)
            out += s_[i_++];
        }
        if (i_ >= s_.size())
            fail("unterminated string");
        ++i_;
        return out;
    }

    Value value()
    {
        skip();
        if (i_ >= s_.size())
            fail("unexpected end");
        Value v;
        char c = s_[i_];
        if (c == '{')
        {
            ++i_;
            v.kind = Value::Object;
            if (eat('}'))
                return v;
            do
            {
                skip();
                std::string key = str();
                expect(':');
                v.fields[key] = value();
            } while (eat(','));
            expect('}');
        }
        else if (c == '[')
        {
            ++i_;
            v.kind = Value::Array;
            if (eat(']'))
                return v;
            do
            {
                v.items.push_back(value());
            } while (eat(','));
            expect(']');
        }
        else if (c == '"')
        {
            v.kind = Value::String;
            v.text = str();
        }
        else if (s_.compare(i_, 4, "true") == 0 || s_.compare(i_, 5, "false") == 0)
        {
            v.kind = Value::Bool;
            v.boolean = s_[i_] == 't';
            i_ += v.boolean ? 4 : 5;
        }
        else if (s_.compare(i_, 4, "null") == 0)
        {
            i_ += 4;
        }
        else
        {
            char* end = nullptr;
            v.kind = Value::Number;
            v.number = std::strtod(s_.c_str() + i_, &end);
            if (end == s_.c_str() + i_)
                fail("bad value");
            i_ = end - s_.c_str();
        }
        return v;
    }
};

inline Value parse(const std::string& text)
{
    return Parser(text).parse();
}

} // namespace mini_json
