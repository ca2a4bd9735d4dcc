package io.opentelemetry.api.common;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface AttributesBuilder {
    Attributes build();

    AttributesBuilder put(String key, String value);

    AttributesBuilder put(String key, long value);

    AttributesBuilder put(String key, boolean value);

    AttributesBuilder put(String key, double value);

    AttributesBuilder putAll(Attributes attributes);
}
