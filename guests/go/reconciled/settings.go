package reconciled

import (
	"encoding/json"

	"reconciled.dev/guest/internal/host"
)

// Settings decodes the settings this deployment of the module was given into v (a pointer),
// as encoding/json does: always an object, {} when none were given, so give every field a
// default. They come from whoever deploys the module (a [[guest]]'s settings in the host
// config, or a <stem>.settings.json key beside a ConfigMap module) and are fixed for the life
// of a version. Not callable from Describe. Settings that do not decode are an [Invalid] error.
func Settings(v any) error {
	if err := json.Unmarshal([]byte(host.Current.Settings()), v); err != nil {
		return Errorf(Invalid, "the settings do not decode into %T: %v", v, err)
	}
	return nil
}
