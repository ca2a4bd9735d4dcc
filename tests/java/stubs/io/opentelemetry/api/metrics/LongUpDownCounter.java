package io.opentelemetry.api.metrics;

import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.context.Context;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface LongUpDownCounter {
    void add(long value);

    void add(long value, Attributes attributes);

    void add(long value, Attributes attributes, Context context);
}
