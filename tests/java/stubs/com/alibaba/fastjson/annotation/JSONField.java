package com.alibaba.fastjson.annotation;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/** Stub of fastjson's field annotation: only the attributes RocketMQ's sources set. */
@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.METHOD, ElementType.FIELD, ElementType.PARAMETER})
public @interface JSONField {
    String name() default "";

    boolean value() default false;

    boolean serialize() default true;

    boolean deserialize() default true;

    Class<?> serializeUsing() default Void.class;

    Class<?> deserializeUsing() default Void.class;
}
