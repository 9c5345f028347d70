package temporal

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// RegisterSearchAttributes registers the engine's search attributes
// (SearchAttributeQueue, SearchAttributeSaga, SearchAttributeInstance,
// all Keyword) in namespace through the operator service of c's server,
// which WithSearchAttributes needs. Attributes already registered are
// left as they are. It needs a self-hosted server and operator
// permissions; on Temporal Cloud, create them with tcld or the web UI.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	want := map[string]enumspb.IndexedValueType{}
	for _, k := range []string{SearchAttributeQueue.GetName(), SearchAttributeSaga.GetName(), SearchAttributeInstance.GetName()} {
		want[k] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("temporal: listing the search attributes of %s: %w", namespace, err)
	}
	for k, typ := range want {
		if got, ok := have.GetCustomAttributes()[k]; ok {
			if got != typ {
				return fmt.Errorf("%w: search attribute %s of %s is a %v, want %v", ErrInvalidOption, k, namespace, got, typ)
			}
			delete(want, k)
		}
	}
	if len(want) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: want})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("temporal: registering search attributes in %s: %w", namespace, err)
	}
	return nil
}
