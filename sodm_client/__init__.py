"""A Python client of the sodm API (httpx alone; none of the service's dependencies).

    from sodm_client import Client, SodmError

    with Client("http://127.0.0.1:8000", key) as sodm:
        ds = sodm.upload("examples/heart_scale", format="libsvm",
                         progress=lambda sent, total: print(f"{sent}/{total} bytes"))
        model = sodm.train_and_wait(ds["id"], "sodm", params={"kernel": "rbf"},
                                    name="heart", on_event=lambda event, data: print(data))
        sodm.set_alias("heart", "champion", version=model["version"])
        print(sodm.predict([[0.71, 1, 1, -0.32, -0.11, -1, 1, -0.42, -1, -0.23, 0, 1, -1]],
                           model="heart@champion")["labels"])

Return values are the API's JSON bodies, typed by ``sodm_client.types`` (generated from
the service's OpenAPI document); every failure is a ``SodmError`` carrying the RFC 9457
problem.
"""

from sodm_client.client import Client
from sodm_client.errors import SodmError

__all__ = ["Client", "SodmError"]
