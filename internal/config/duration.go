package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// String renders d the way the file accepts it, without zero units: "30s", "15m", "1h30m",
// "500ms".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ParseDuration reads a Duration as the configuration file writes it: a Go duration string
// ("30s", "2m", "1h30m") or a plain number of seconds ("90", "0.5"). Negative values parse;
// Validate rejects them where they make no sense.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return secondsToDuration(f)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a number of seconds or a duration such as \"30s\" or \"2m\"", s)
	}
	return Duration(d), nil
}

func secondsToDuration(f float64) (Duration, error) {
	ns := f * float64(time.Second)
	if math.IsNaN(ns) || ns > math.MaxInt64 || ns < math.MinInt64 {
		return 0, fmt.Errorf("duration of %v seconds is out of range", f)
	}
	return Duration(ns), nil
}

var durationType = reflect.TypeFor[Duration]()

// durationHook is a mapstructure decode hook turning strings ("30s", "2m", "45") and plain
// numbers (seconds) into Duration.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch from {
	case durationType:
		return data, nil
	case reflect.TypeFor[time.Duration]():
		return Duration(data.(time.Duration)), nil
	}
	v := reflect.ValueOf(data)
	switch from.Kind() {
	case reflect.String:
		return ParseDuration(v.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return secondsToDuration(float64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return secondsToDuration(float64(v.Uint()))
	case reflect.Float32, reflect.Float64:
		return secondsToDuration(v.Float())
	}
	return data, nil
}
