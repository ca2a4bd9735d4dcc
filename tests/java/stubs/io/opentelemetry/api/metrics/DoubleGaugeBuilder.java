package io.opentelemetry.api.metrics;

import java.util.function.Consumer;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface DoubleGaugeBuilder {
    DoubleGaugeBuilder setDescription(String description);

    DoubleGaugeBuilder setUnit(String unit);

    LongGaugeBuilder ofLongs();

    ObservableDoubleGauge buildWithCallback(Consumer<ObservableDoubleMeasurement> callback);
}
