package io.opentelemetry.api.metrics;

import java.util.function.Consumer;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface LongGaugeBuilder {
    LongGaugeBuilder setDescription(String description);

    LongGaugeBuilder setUnit(String unit);

    ObservableLongGauge buildWithCallback(Consumer<ObservableLongMeasurement> callback);
}
