"""The tokenization stage: one worker, 5 ms + 0.5 ms per prompt token."""

from __future__ import annotations

from engines import TokenizerStage


def main() -> None:
    stage = TokenizerStage(workers=1, base_ms=5.0, per_input_token_us=500.0)
    print(stage.tokenized_ms([(0.0, 4)]))
    print(stage.tokenized_ms([(0.0, 4), (0.0, 4)]))
    print(stage.tokenized_ms([(0.0, 4), (0.0, 4), (1.0, 100)]))
    two = TokenizerStage(workers=2, base_ms=5.0, per_input_token_us=500.0)
    print(two.tokenized_ms([(0.0, 4), (0.0, 4), (1.0, 100)]))
    print(TokenizerStage().tokenized_ms([(0.0, 4), (2.5, 100)]))  # off by default


if __name__ == "__main__":
    main()
