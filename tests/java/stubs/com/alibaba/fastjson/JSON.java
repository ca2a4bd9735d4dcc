package com.alibaba.fastjson;

import com.alibaba.fastjson.serializer.SerializerFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.lang.reflect.Type;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Stub of fastjson's JSON facade over Jackson: only the calls the store's write path makes
 * (config and metrics files beside the store, never the CommitLog or the queues).
 */
public final class JSON {
    private static final ObjectMapper MAPPER = new ObjectMapper()
        .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false)
        .configure(SerializationFeature.FAIL_ON_EMPTY_BEANS, false);

    private JSON() {
    }

    public static String toJSONString(Object obj) {
        try {
            return MAPPER.writeValueAsString(obj);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static String toJSONString(Object obj, boolean pretty) {
        try {
            return pretty ? MAPPER.writerWithDefaultPrettyPrinter().writeValueAsString(obj) : MAPPER.writeValueAsString(obj);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static String toJSONString(Object obj, SerializerFeature... features) {
        return toJSONString(obj);
    }

    public static byte[] toJSONBytes(Object obj, SerializerFeature... features) {
        return toJSONString(obj).getBytes(StandardCharsets.UTF_8);
    }

    public static void writeJSONString(Writer writer, Object obj, SerializerFeature... features) {
        try {
            writer.write(toJSONString(obj));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static <T> T parseObject(String text, Class<T> clazz) {
        try {
            return MAPPER.readValue(text, clazz);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static <T> T parseObject(String text, Type type) {
        try {
            return MAPPER.readValue(text, MAPPER.getTypeFactory().constructType(type));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    public static <T> T parseObject(String text, TypeReference<T> type) {
        return parseObject(text, type.getType());
    }

    public static <T> T parseObject(byte[] data, Class<T> clazz) {
        return parseObject(new String(data, StandardCharsets.UTF_8), clazz);
    }

    public static <T> List<T> parseArray(String text, Class<T> clazz) {
        try {
            return MAPPER.readValue(text, MAPPER.getTypeFactory().constructCollectionType(List.class, clazz));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
